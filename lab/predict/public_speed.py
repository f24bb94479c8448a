"""Published single-stream decode speeds of Qwen3.5/3.6/3.8-27B on the cards the lab's users have
(lab/data/public_speed.yaml): the rows, validated, and the bytes each reads per token. The lab's one decode-speed
model (lab.predict.roofline's per-token model) is fitted on them and checked against them in
lab.predict.public_check.

Every row is a measurement somebody published, with its URL and a verbatim quote; `load` refuses a row without
them (pydantic, extra="forbid"). Speculative (MTP) rows are stored with their n-max and acceptance, but only rows
without speculation are predicted here: the MTP speed model is separate.

A row is predictable when the per-token model describes its set-up: llama.cpp mainline, no speculation, a GPU in
calibration.yaml's gpus, a published file size, one GPU or a layer split (llama.cpp then decodes one GPU at a time:
one GPU's bandwidth), all layers on the GPU. Bytes read per token = file size + KV at the row's depth (full-attention
layers, at its KV type) + the Gated DeltaNet state. A row with an `outlier` note (a power cap or overclock, a
release-day build, an i-quant whose decode is partly compute-bound) is predicted and shown, but it neither fits
the model nor counts toward the targets; the note says why.

Depth: a row decoded at DEEP_TOKENS or more is predicted and checked as its own group, not fitted. The model's depth
term is complete as bytes (K and V of the 16 full-attention layers, every 4th of the 64, at the row's KV type; the
recurrent state is fixed-size), but the public deep rows decode slower than those bytes explain (attention's
arithmetic over every cached token, which the model has no term for): fitted, they would drag the card's bandwidth
fraction down for every shallow prediction. A llama.cpp -sm tensor row enters the fit through
lab.predict.tp_model's pessimistic bound (`tensor_point`: per-card bytes, its time less the all-reduces over its
link) only for an architecture with no one-card or layer-split row (the all-reduce latency is assumed,
gpu_links.yaml): the Tesla P40's only published rows are tensor splits.
"""
from __future__ import annotations

import re

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lab.core import facts
from lab.predict import kvcache

FAMILY = "qwen35"  # every model in the dataset is the Qwen3.5 hybrid shape (64 layers, 48 Gated DeltaNet + 16 attention)
N_LAYERS, HIDDEN = 64, 5120  # the Qwen3.5-27B shape every row shares (lab/data/model_configs.yaml qwen3.8-27b)
DEEP_TOKENS = 8192  # a row decoded at this depth or more is checked as the depth group, not fitted (module docstring)
UNPUBLISHED = "lab-run:"  # the source of an owner's own measured run (lab share), accepted from --rows-dataset only
EXTRA_ROWS: list = []  # an owner's rows (lab.predict.user_rows.using), added to load()'s: every fit sees them


class PublicSpeedError(ValueError):
    """A row of lab/data/public_speed.yaml is malformed."""


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    n_max: int | None = Field(default=None, ge=1)
    acceptance: str | None = None  # as published: a range, an aggregate, or both
    p_min: float | None = Field(default=None, ge=0, le=1)


class Row(BaseModel):
    """One published measurement."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    model: Literal["Qwen3.5-27B", "Qwen3.6-27B", "Qwen3.8-27B"]
    gpu: str
    gpu_id: str | None = None  # an id of calibration.yaml's gpus, when the card is there
    gpu_count: int = Field(ge=1)
    engine: Literal["llama.cpp", "ik_llama.cpp", "vLLM", "fork"]
    build: str | None = None
    quant: str | None = None
    file_gb: float | None = Field(default=None, gt=0)  # 1e9 bytes
    file_gb_basis: str | None = None
    context_tokens: int | None = Field(default=None, gt=0)  # allocated (-c / max-model-len)
    depth_tokens: int | None = Field(default=None, ge=0)  # tokens in the sequence while decoding; None: a short prompt
    kv_type: str | None = None
    split_mode: Literal["none", "layer", "tensor"]
    link: str | None = None  # multi-GPU rows: the GPU-to-GPU link, an id of lab/data/gpu_links.yaml's links
    backend: Literal["cuda", "rocm", "vulkan", "metal", "sycl"] | None = None  # llama.cpp's; None: the card's default
    os: Literal["linux", "windows"] | None = None  # None: not stated (the rows that state it are mostly Linux)
    all_layers_on_gpu: bool = True
    speculative: Speculative | None
    decode_tok_s: float = Field(gt=0)
    decode_tok_s_sd: float | None = Field(default=None, ge=0)  # the spread of the samples (lab share: llama-bench's sd)
    samples: list[float] | None = None  # the raw samples decode_tok_s summarises, when published
    prompt_tok_s: float | None = Field(default=None, gt=0)
    vram_mib: float | None = Field(default=None, gt=0)  # the card's memory in use once loaded (plain decode), as published
    vram_basis: str | None = None  # the published words for vram_mib
    driver: str | None = None
    flags: list[str] | None = None  # the server's or bench's flags as run (paths reduced to file names)
    method: str
    notes: str | None = None
    outlier: str | None = None
    # kept apart: never fitted, predicted by the model fitted on every other row and summarised on its own
    # (`.venv/bin/python -m lab predict --validate`, "kept apart"): the judge of the fit on rows it did not see
    heldout: bool = False
    source: str
    run_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # lab share: the run folder's digest
    quote: str = Field(min_length=3)
    read: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")  # the day the source was read (rows added
    measured: Literal[True]                                                  # or re-read from 2026-12-05 on)

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://", UNPUBLISHED)):
            raise ValueError("must be the URL the number was published at (https://...), or, for an owner's own run "
                             f"(`.venv/bin/python -m lab share`), {UNPUBLISHED}<run id>")
        return v


def gpu_specs() -> dict:
    """calibration.yaml's gpus by id (lab.predict.roofline.gpu_specs reads the same list; this module sits below
    roofline, which fits its per-token model on these rows)."""
    return {g["id"]: g for g in facts.load("calibration", "gpus")["gpus"]}


def calibration_key(gpu_id: str, backend: str | None = None) -> str:
    """The per-token model's calibration a card on a backend uses: its architecture on the card's own backend
    (calibration.yaml gpus `backend`: cuda for NVIDIA, rocm for AMD), "<arch>+<backend>" on another (an AMD card
    on Vulkan decodes at its own fraction of bandwidth: calibrated apart)."""
    g = gpu_specs()[gpu_id]
    default = g.get("backend", "cuda")
    return g["arch"] if backend in (None, default) else f"{g['arch']}+{backend}"


def row_key(row: "Row") -> str:
    """calibration_key of a public row (its card and stated backend)."""
    return calibration_key(row.gpu_id, row.backend)


def is_windows(row: "Row") -> bool:
    """Measured on Windows: set apart (the published Windows/Linux pairs disagree in sign; not modelled)."""
    return row.os == "windows"


def same_card(a: str, b: str) -> bool:
    """Two calibration.yaml gpu ids describe the same card for decode: the same id, or the same architecture and
    datasheet bandwidth (a 16 GB and a 32 GB V100)."""
    specs = gpu_specs()
    ga, gb = specs[a], specs[b]
    return a == b or (ga["arch"] == gb["arch"] and ga["bandwidth_gb_s"] == gb["bandwidth_gb_s"])


def link_figures() -> dict:
    """lab/data/gpu_links.yaml's links by id (the same list lab.measure.gpu_links reads; this module sits below it)."""
    return {e["id"]: e for e in facts.load("gpu_links", "links")["links"]}


def _format(exc: ValidationError, data: dict) -> str:
    parts = []
    for e in exc.errors():
        field = ".".join(str(x) for x in e["loc"]) or "row"
        parts.append(f"field '{field}': {e['msg']}")
    return f"row {data.get('id', '?')!r}: " + "; ".join(parts)


def validate_rows(raw: list[dict], where: str = "lab/data/public_speed.yaml", unpublished_ok: bool = False) -> list[Row]:
    """Rows checked one by one; the first bad one raises PublicSpeedError naming the row, field and fix.
    `unpublished_ok`: an owner's own rows (lab share's source lab-run:<run id>) are accepted, as from --rows-dataset;
    the lab's own dataset holds published rows only."""
    known = set(gpu_specs())
    links = set(link_figures())
    rows, seen = [], set()
    for i, data in enumerate(raw):
        if not isinstance(data, dict):
            raise PublicSpeedError(f"{where}: entry {i} is not a mapping")
        try:
            row = Row.model_validate(data)
        except ValidationError as exc:
            raise PublicSpeedError(f"{where}: {_format(exc, data)} (every row needs a published URL, a verbatim "
                                   f"quote and positive tok/s)") from None
        if row.id in seen:
            raise PublicSpeedError(f"{where}: row id {row.id!r} appears twice; give each row its own id")
        if row.source.startswith(UNPUBLISHED) and not unpublished_ok:
            raise PublicSpeedError(f"{where}: row {row.id!r}: source {row.source!r} is an unpublished run; the lab's "
                                   "dataset takes the URL it was published at (give your rows with --rows-dataset)")
        if row.gpu_id is not None and row.gpu_id not in known:
            raise PublicSpeedError(f"{where}: row {row.id!r}: gpu_id {row.gpu_id!r} is not in lab/data/calibration.yaml "
                                   f"gpus; add the card there with its datasheet bandwidth and source")
        if row.link is not None and row.link not in links:
            raise PublicSpeedError(f"{where}: row {row.id!r}: link {row.link!r} is not in lab/data/gpu_links.yaml "
                                   f"links; add the link there with its bandwidth and source")
        seen.add(row.id)
        rows.append(row)
    return rows


def load(path: str | Path | None = None) -> list[Row]:
    """The dataset (lab/data/public_speed.yaml, or `path`), validated; with an owner's rows added while
    lab.predict.user_rows.using is in effect (the lab's dataset only, not a `path`)."""
    if path is None:
        data = facts.load("public_speed")
        where = "lab/data/public_speed.yaml"
    else:
        data, where = yaml.safe_load(Path(path).read_text()), str(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise PublicSpeedError(f"{where}: expected a list under 'rows'")
    rows = validate_rows(data["rows"], where)
    if path is None and EXTRA_ROWS:
        ids = {r.id for r in rows}
        clash = [r.id for r in EXTRA_ROWS if r.id in ids]
        if clash:
            raise PublicSpeedError(f"your rows reuse the id(s) {', '.join(clash)} of lab/data/public_speed.yaml: "
                                   "rename them")
        rows += list(EXTRA_ROWS)
    return rows


# ---------------------------------------------------------------- what the model can predict, and the bytes it reads
def unpredictable_reason(row: Row) -> str | None:
    """Why the per-token model does not describe this row's set-up; None when it does."""
    if row.speculative is not None:
        return "speculative decoding (the MTP speed model is separate)"
    if row.engine != "llama.cpp":
        return f"{row.engine}: the per-token model is llama.cpp's"
    if row.gpu_id is None:
        return "GPU not in lab/data/calibration.yaml gpus (no datasheet bandwidth)"
    if row.file_gb is None:
        return "file size not published"
    if row.split_mode == "tensor":
        return "tensor split: lab.predict.tp_model's (public_check.tensor_check), not the one-card check"
    if not row.all_layers_on_gpu:
        return "layers offloaded to the CPU"
    return None


def _arch():
    from lab.model import models

    return models.stand_in("qwen3.8-27b")


def gguf_type(quant: str | None) -> str:
    """The llama.cpp type a row's quant names ("unsloth UD-Q4_K_XL" -> Q4_K_M, "IQ4_XS" -> IQ4_XS), Q4_K_M when it
    names none the lab models: only its token embedding and MTP block are taken from that mix."""
    from lab.model import quant_targets

    m = re.search(r"(IQ\d_[A-Z]+|Q\d_K(?:_[SML])?|Q\d_0|BF16)", (quant or "").upper())
    t = m.group(1) if m else "Q4_K_M"
    t = t if t[-2:] in ("_S", "_M", "_0", "XS", "16") or t.startswith("IQ") else t + "_M"
    return t if quant_targets.gguf_parts("qwen3.8-27b", t) is not None else "Q4_K_M"


def not_read_bytes(row: Row) -> int:
    """Bytes of the row's file that plain decoding does not read (lab/data/calibration.yaml `read_per_token`): the
    token embedding (host memory) and, in a Qwen3.8-27B file, the MTP block; sized by llama.cpp's mix of the type the
    row names (lab.model.quant_targets.gguf_parts)."""
    from lab.model import quant_targets

    parts = quant_targets.gguf_parts("qwen3.8-27b", gguf_type(row.quant))
    return parts["token_embd"] + (parts["mtp"] if row.model == "Qwen3.8-27B" else 0)


def bytes_per_token(row: Row) -> float:
    """Bytes read per decoded token (lab.predict.roofline.read_definition): the file less what decoding does not read
    (`not_read_bytes`) + KV at the row's depth (full-attention layers at its KV type, f16 when unstated) + the
    Gated DeltaNet layers' recurrent state."""
    arch = _arch()
    kv_type = row.kv_type if row.kv_type in ("f16", "q8_0", "q4_0") else "f16"
    kv = kvcache.kv_bytes_per_token(arch, kv_type) * (row.depth_tokens or 0)
    return row.file_gb * 1e9 - not_read_bytes(row) + kv + arch.linear_state_bytes_per_seq


def is_deep(row: Row) -> bool:
    """Decoded at DEEP_TOKENS or more (the depth group: checked, not fitted)."""
    return (row.depth_tokens or 0) >= DEEP_TOKENS


def fitted(row: Row) -> bool:
    """May enter a fit: no outlier note, not measured on Windows (not modelled), not kept apart."""
    return row.outlier is None and not is_windows(row) and not row.heldout


def comparable(row: Row) -> bool:
    """Predictable, no outlier note, on one of the lab users' cards, shallower than DEEP_TOKENS, not on Windows, not
    kept apart: the rows the plain targets apply to (and the fit)."""
    return (unpredictable_reason(row) is None and fitted(row) and gpu_specs()[row.gpu_id]["budget"]
            and not is_deep(row))


def tensor_reason(row: Row) -> str | None:
    """Why lab.predict.tp_model cannot predict a llama.cpp -sm tensor row; None when it can."""
    return ("file size not published" if row.file_gb is None else "no link (lab/data/gpu_links.yaml id)"
            if row.link is None else "GPU not in lab/data/calibration.yaml gpus" if row.gpu_id is None else None)


def comm_s(row: Row) -> float:
    """Seconds of all-reduces per token of a -sm tensor row over its link (lab.predict.tp_model: two per layer + one,
    the hidden state in F32 as the pinned llama.cpp reduces it)."""
    from lab.predict import tp_model

    link = tp_model.link_from(link_figures()[row.link])
    return (tp_model.allreduces_per_token(N_LAYERS)
            * tp_model.allreduce_s(tp_model.message_bytes(HIDDEN, 1, 4), row.gpu_count, link))


def tensor_point(row: Row) -> dict:
    """A -sm tensor row as one card's point of fit_per_token's shape: lab.predict.tp_model's pessimistic bound
    t = bytes ÷ n ÷ (fraction × bandwidth) + fixed + all-reduces is the per-token model's t on bytes ÷ n at the time
    less the all-reduces (each card reads its 1/n of the weights and KV: heads and matrix rows split)."""
    g = gpu_specs()[row.gpu_id]
    return {"id": row.id, "family": FAMILY, "arch": row_key(row), "weights_bytes": bytes_per_token(row) / row.gpu_count,
            "tok_s": 1.0 / (1.0 / row.decode_tok_s - comm_s(row)), "datasheet_gb_s": g["bandwidth_gb_s"],
            "split": "tensor"}


def fit_points(rows: list[Row] | None = None) -> list[dict]:
    """The rows the per-token model is fitted on, in roofline.fit_per_token's shape: every predictable row without an
    outlier note shallower than DEEP_TOKENS (not on Windows, not kept apart: `fitted`); and, for a calibration
    (architecture, or architecture + backend: `calibration_key`) none of those rows is of, its llama.cpp -sm tensor
    rows of that kind (`tensor_point`)."""
    rows = load() if rows is None else rows
    out = []
    for r in rows:
        if unpredictable_reason(r) is None and fitted(r) and not is_deep(r):
            g = gpu_specs()[r.gpu_id]
            out.append({"id": r.id, "family": FAMILY, "arch": row_key(r), "weights_bytes": bytes_per_token(r),
                        "tok_s": r.decode_tok_s, "datasheet_gb_s": g["bandwidth_gb_s"]})
    covered = {p["arch"] for p in out}
    for r in rows:
        if (r.split_mode == "tensor" and r.engine == "llama.cpp" and r.speculative is None and fitted(r)
                and tensor_reason(r) is None and not is_deep(r) and row_key(r) not in covered):
            out.append(tensor_point(r))
    return out


__all__ = ["UNPUBLISHED", "EXTRA_ROWS", "calibration_key", "row_key", "gguf_type", "is_windows", "fitted", "Row", "Speculative", "PublicSpeedError", "load", "validate_rows", "gpu_specs", "same_card", "link_figures", "unpredictable_reason",
           "bytes_per_token", "not_read_bytes", "comparable", "fit_points", "FAMILY", "N_LAYERS", "HIDDEN", "DEEP_TOKENS",
           "is_deep", "tensor_reason", "comm_s", "tensor_point"]
