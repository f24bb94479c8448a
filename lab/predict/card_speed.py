"""`lab predict`: what a card does with Qwen3.8-27B, from the few numbers its owner knows, by the lab's one speed model.

No second formula: an ask (a card as people write it, how many, the split, the engine, the download size, the KV
type, context, depth, MTP settings) becomes a Profile (lab.core.profiles) and goes through the functions `lab plan`
calls for a profile's card: lab.predict.profile_speed.roofline_for (the per-token model for llama.cpp, the nearest
calibration's efficiency for vLLM), lab.predict.memory_plan.plan_memory (does it fit), and, as the V100 routes do
(lab.predict.routes), lab.predict.public_check.tensor_tok_s for -sm tensor and lab.predict.mtp_model for draft-mtp.
A -sm layer split is predicted at one card's bandwidth, as `lab plan`'s headline and the public check do (the hop
between cards, lab.predict.tp_model.pp_decode, is 0.03 % of a token on NVLink and is left out there too).

Inputs the model has no term for are reported, never modelled here: `notes` says which, and what the published rows
say about them. Pure: lab/data and the profile, never a GPU, a process or the network.
"""
from __future__ import annotations

import dataclasses
import difflib
import re

from lab.core import facts, paths
from lab.predict import public_speed, roofline
from lab.predict.card_setup import (MODEL_ID, backend_plan, depth_note, fallback_note, fraction_from, laptop_note,
                                   memory_verdict, mtp_answer, owners_overhead, quant_plan, tensor_kv_note, windows_note)

DEFAULT_QUANT = {"llama.cpp": "Q4_K_M", "vllm": "AWQ-INT4"}  # the V100 profiles' GGUF and routes.yaml's fork weights
DEFAULT_CONTEXT = 32768  # -c: one 32K conversation (seed 001's "16K or even 32K"; params/v100-32g-x1.yaml per slot)
DEFAULT_LINK = "pcie3-x16"  # -sm tensor without --link: the plainest pair, two cards in PCIe 3.0 x16 slots
SPLITS = ("none", "layer", "tensor")
SPECS = ("none", "draft-mtp")
ENGINES = ("llama.cpp", "vllm")
BACKENDS = ("cuda", "rocm", "vulkan", "metal", "sycl")  # llama.cpp's GPU backends (public_speed.Row.backend)
SYSTEMS = ("linux", "windows")
# Profile requires a compute capability for a GPU; the GPU table has none and neither the speed model nor the
# memory plan reads it (only lab.predict.compat, which `lab predict` does not run): this value is never shown.
CC_NOT_READ = "0.0"
DEEP_TOKENS = public_speed.DEEP_TOKENS  # beyond this the note on depth is shown (rows this deep are not fitted)


class UnknownCard(ValueError):
    """A GPU name the lab's GPU table (lab/data/calibration.yaml gpus) does not resolve."""


@dataclasses.dataclass
class Ask:
    """One row of `lab predict`: None = not given (a default, or the --profile's value, fills it)."""

    gpu: str | None = None
    gpus: int | None = None
    split: str | None = None
    engine: str | None = None
    weights_gb: float | None = None  # the GGUF as listed for download (GB = 1e9 bytes), MTP block included
    quant: str | None = None
    kv: str | None = None
    context: int | None = None
    slots: int | None = None
    depth: int | None = None
    spec: str | None = None
    n_max: int | None = None
    p_min: float | None = None
    acceptance: float | None = None
    link: str | None = None
    backend: str | None = None  # llama.cpp's backend; None: the card's own (cuda for NVIDIA, rocm for AMD)
    os: str | None = None  # "windows" is reported with the published Windows/Linux pairs, not modelled
    gpu_util: float | None = None  # vLLM --gpu-memory-utilization (default the profile schema's 0.9)


# ---------------------------------------------------------------- cards as people write them
def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _short(name: str) -> str:
    return re.sub(r"^(NVIDIA|GeForce|Tesla)\s+(RTX\s+)?", "", name)


def _matches(pattern: str, text: str) -> bool:
    """The card's `match` regex found in `text`, not inside a longer number ("P40" is not in "Quadro P4000")."""
    for m in re.finditer(pattern, text, re.IGNORECASE):
        s, e = m.start(), m.end()
        inside = (m.group(0)[:1].isdigit() and s > 0 and text[s - 1].isdigit()) or \
                 (m.group(0)[-1:].isdigit() and e < len(text) and text[e].isdigit())
        if not inside:
            return True
    return False


def suggestions(text: str, n: int = 3) -> list[str]:
    """Card names close to `text`: its `match` found inside a longer number ("P4000" → the P40), a name holding it
    ("4060" → the 4060 Ti), or by spelling (difflib)."""
    keys = {}
    for g in roofline.gpu_specs():
        for k in (g["id"], g["name"], _short(g["name"])):
            keys.setdefault(_norm(k), g["name"])
    q = _norm(text)
    near = [g["name"] for g in roofline.gpu_specs() if re.search(g["match"], text, re.IGNORECASE)]
    near += [name for k, name in keys.items() if len(q) >= 3 and q in k]
    near += [keys[k] for k in difflib.get_close_matches(q, list(keys), n=n, cutoff=0.5)]
    return list(dict.fromkeys(near))[:n]


def resolve_card(text: str | None) -> dict:
    """The GPU table's entry for a card as people write it ("Tesla P40", "P40", "3090", "V100 32GB",
    "v100-sxm2-32gb", an id such as "rtx-3090"): an id or name first, then the entries' `match` regexes, the most
    specific (longest) winning, as lab.predict.roofline.gpu_spec_for does for a profile. UnknownCard otherwise,
    with the nearest names and how to list them all."""
    q = (text or "").strip()
    specs = roofline.gpu_specs()
    for g in specs:
        if q and _norm(q) in (_norm(g["id"]), _norm(g["name"]), _norm(_short(g["name"]))):
            return g
    hits = [g for g in specs if q and _matches(g["match"], q)]
    if hits:
        g = max(hits, key=lambda g: len(g["match"]))
        if re.search(r"laptop|mobile", q, re.IGNORECASE) and not g.get("laptop"):  # another chip, half the bandwidth
            raise UnknownCard(f"unknown card {q!r}: a laptop part is its own chip, not the desktop {g['name']}, and the "
                              "lab's GPU table has no entry for it (lab/data/calibration.yaml gpus; `.venv/bin/python -m lab "
                              "predict --list-gpus`)")
        return g
    near = suggestions(q) if q else []
    raise UnknownCard(f"unknown card {q!r}" + (f"; did you mean {' or '.join(repr(s) for s in near)}?" if near else "")
                      + " `.venv/bin/python -m lab predict --list-gpus` lists the cards the lab knows (lab/data/calibration.yaml gpus)")


def card_rows() -> list[dict]:
    """The GPU table for `--list-gpus`: id, name, bandwidth, memory, architecture, and the calibration it uses."""
    out = []
    for g in roofline.gpu_specs():
        frac, how = fraction_from(g["arch"])
        out.append({"id": g["id"], "name": g["name"], "GB/s": g["bandwidth_gb_s"], "GiB": g["memory_gib"],
                    "arch": g["arch"], "fraction": round(frac, 2),
                    "calibration": "fallback: median of the fitted architectures" if how.startswith("FALLBACK")
                    else f"fitted: {len(roofline.per_token_model().rows_by_arch.get(g['arch'], ()))} row(s)"})
    return out


# ---------------------------------------------------------------- an ask → a Profile
def default_depth() -> int:
    """The depth `lab plan` judges a GPU profile at when nothing names one (calibration.yaml read_per_token)."""
    return int(facts.load("calibration")["read_per_token"]["default_depth_tokens"])


def filled(ask: Ask, base=None) -> tuple[Ask, list[str]]:
    """The ask with every None filled: from the profile `base` when given (its card, split, KV, context, slots, quant
    and benchmark depth, as `lab plan` reads them), else the lab's defaults; and the notes on what was changed."""
    notes = []
    a = dataclasses.replace(ask)
    if base is not None:
        a.gpus = a.gpus if a.gpus is not None else base.gpu_count
        a.engine = a.engine or ("vllm" if base.engine == "vllm" else "llama.cpp")
        if a.split is None:
            a.split = ((base.split_mode or "layer") if a.engine == "llama.cpp" else "tensor"
                       if base.tensor_parallel_size > 1 else "layer") if a.gpus > 1 else "none"
        a.kv = a.kv or base.kv_cache_dtype
        a.context = a.context or base.context_tokens
        a.slots = a.slots or base.parallel_slots
        a.quant = a.quant or base.model_quant
        a.depth = a.depth if a.depth is not None else base.bench_prompt_tokens + base.bench_output_tokens // 2
    a.gpus = a.gpus or 1
    a.engine = a.engine or "llama.cpp"
    a.split = a.split or ("none" if a.gpus == 1 else "tensor" if a.engine == "vllm" else "layer")
    if a.gpus == 1 and a.split != "none":
        notes.append(f"split {a.split} on one card: no split (predicted as one card)")
        a.split = "none"
    if a.gpus > 1 and a.split == "none":
        notes.append(f"split none uses one of the {a.gpus} cards (llama.cpp -sm none: the -mg card): predicted on one")
        a.gpus = 1
    a.kv = a.kv or "f16"
    a.context = a.context or DEFAULT_CONTEXT
    a.slots = a.slots or 1
    a.quant = a.quant or DEFAULT_QUANT.get(a.engine, "Q4_K_M")
    a.depth = a.depth if a.depth is not None else default_depth()
    if a.spec is None:
        a.spec = "draft-mtp" if a.n_max is not None or a.acceptance is not None else "none"
    if a.split == "tensor" and a.engine == "llama.cpp":
        a.link = a.link or DEFAULT_LINK
    return a, notes


def build_profile(a: Ask, card: dict, base=None, mix_quant: str | None = None):
    """The Profile of a filled ask (validated by the lab's own schema). llama.cpp -sm tensor with a quantized KV cache
    is refused by the schema (the pinned llama.cpp refuses it): the profile is validated with f16 and then given the
    asked KV type, so the numbers are the asked set-up's; the caller says so in a note. `mix_quant`: the llama.cpp
    mix that sizes the MTP block and token embedding of a stated download whose own type the lab has no mix for
    (`quant_plan`); default the asked quant."""
    from lab.core.profiles import Profile

    llama = a.engine == "llama.cpp"
    quantized_tensor_kv = llama and a.split == "tensor" and a.kv not in ("f16", "bf16", "auto")
    # exclude_unset: what the profile left to the schema's defaults stays a default (an endpoint profile sets no port)
    data = base.model_dump(exclude_unset=True) if base is not None else {
        "name": "predict", "description": "lab predict", "model_architecture": f"config:{MODEL_ID}",
        "model_name": f"Qwen3.8-27B-{a.quant}", "host_ram_gib_min": 32}
    if base is None or a.gpu is not None:
        data.update(gpu_name_pattern=card["name"], gpu_vram_mib=round(card["memory_gib"] * 1024),
                    gpu_compute_capability=CC_NOT_READ, gpu_memory_bandwidth_gb_s=float(card["bandwidth_gb_s"]))
    data.update(gpu_count=a.gpus, engine=a.engine, model_quant=mix_quant or a.quant, context_tokens=a.context,
                parallel_slots=a.slots, kv_cache_dtype="f16" if quantized_tensor_kv else a.kv,
                split_mode=(a.split if a.gpus > 1 else None) if llama else None,
                tensor_split=[1.0] * a.gpus if llama and a.gpus > 1 and a.split == "layer" else None,
                tensor_parallel_size=a.gpus if not llama and a.split == "tensor" else 1,
                pipeline_parallel_size=a.gpus if not llama and a.split == "layer" else 1,
                main_gpu=None, cuda_visible_devices=None, nvlink_expected=bool(data.get("nvlink_expected")) and a.gpus > 1,
                n_gpu_layers=-1 if llama else 0)
    if a.gpu_util is not None:
        data.update(gpu_memory_utilization=a.gpu_util)
    if base is None or base.engine != a.engine:
        data.update(engine_version=paths.LLAMA_CPP_PYTHON_VERSION if llama else "unknown (lab predict)",
                    dtype="auto" if llama else "float16", engine_python=None, enforce_eager=False)
    prof = Profile.model_validate(data)
    return prof.model_copy(update={"kv_cache_dtype": a.kv}) if quantized_tensor_kv else prof


def link_note(link: str) -> str:
    """What was assumed for a multi-card set-up's link when none was given."""
    return (f"link not given: {link} assumed (lab/data/gpu_links.yaml; the lab's own profile for this pair where it has "
            "one, lab/data/routes.yaml); give --link for PCIe or x8 slots")


# ---------------------------------------------------------------- one ask → one answer
ASKED = ("gpu", "gpus", "split", "engine", "link", "weights_gb", "quant", "kv", "context", "slots", "depth", "spec",
         "n_max", "p_min", "acceptance", "backend", "os", "gpu_util")


def problems(a: Ask) -> list[str]:
    """What is out of range in a filled ask (each a why_not); [] when it can be predicted."""
    bad = []
    for name, lo, hi, v in (("gpus", 1, 16, a.gpus), ("context", 1, 1_048_576, a.context), ("slots", 1, 1024, a.slots),
                            ("depth", 1, 1_048_576, a.depth), ("n_max", 1, 16, a.n_max), ("p_min", 0, 1, a.p_min),
                            ("acceptance", 0, 1, a.acceptance), ("weights_gb", 1e-3, 10_000, a.weights_gb),
                            ("gpu_util", 0.05, 1, a.gpu_util)):
        if v is not None and not lo <= v <= hi:
            bad.append(f"{name} {v:g} is out of range ({lo:g} to {hi:g})")
    for name, v, allowed in (("split", a.split, SPLITS), ("engine", a.engine, ENGINES), ("spec", a.spec, SPECS),
                             ("backend", a.backend or "cuda", BACKENDS), ("os", a.os or "linux", SYSTEMS)):
        if v not in allowed:
            bad.append(f"{name} {v!r}: one of {', '.join(allowed)}")
    if a.link is not None and a.link not in public_speed.link_figures():
        bad.append(f"link {a.link!r}: one of {', '.join(public_speed.link_figures())} (lab/data/gpu_links.yaml)")
    return bad


def _card_of(base) -> dict:
    if base.gpu_count == 0:
        raise UnknownCard(f"profile {base.name} has no GPU (gpu_count 0): give --gpu")
    spec = roofline.gpu_spec_for(base.gpu_name_pattern or base.name)
    if spec is None:
        raise UnknownCard(f"unknown card: profile {base.name}'s gpu_name_pattern {base.gpu_name_pattern!r} is not in "
                          "the GPU table; `.venv/bin/python -m lab predict --list-gpus` lists the cards the lab knows")
    return spec


def _schema_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'set-up'}: {e['msg']}" for e in errors())
    return " ".join(str(exc).split())


def _blank(ask: Ask, row: int) -> dict:
    return {"row": row, **dataclasses.asdict(ask), "card": None, "card_id": None, "predicted_tok_s": None,
            "why_not": None, "route": None, "plain_tok_s": None, "ceiling_tok_s": None, "ceiling": None,
            "model": {}, "memory": {}, "notes": []}


def predict(ask: Ask, base=None, row: int = 1) -> dict:
    """One ask's answer: {row, the asked fields (filled), card, card_id, predicted_tok_s, why_not, route, plain_tok_s,
    ceiling_tok_s, ceiling, model: {the terms used}, memory: {the fit}, notes: [...]}. predicted_tok_s is None exactly
    when why_not says why. `base`: a Profile whose card and settings fill what the ask leaves out (`--profile`)."""
    try:
        out = _predict(ask, base, row)
        return out if not (out["why_not"] or "").startswith("does not fit") else _what_fits(ask, base, row, out)
    except (ValueError, KeyError) as exc:  # an input the lab's arithmetic refuses: the row's answer, not a traceback
        return {**_blank(ask, row), "why_not": f"cannot predict this set-up: {' '.join(str(exc).split())}"}


def _what_fits(ask: Ask, base, row: int, failed: dict) -> dict:
    """A "does not fit" at a default the user did not choose is not their set-up's answer: with the KV type not
    given, the largest llama.cpp type that fits (q8_0, then q4_0); with the context not given, the longest that
    fits (memory_plan's max per slot, if it holds the depth); each said in a note. What the user stated is kept,
    and a set-up that does not fit as stated keeps its "does not fit"."""
    if base is not None or failed["engine"] != "llama.cpp":
        return failed
    tries = [dataclasses.replace(ask, kv=kv) for kv in ("q8_0", "q4_0")] if ask.kv is None else []
    per_slot = (failed.get("memory") or {}).get("max_context_per_slot") or 0
    if ask.context is None and per_slot >= max(failed["depth"] or 0, 1024):
        tries.insert(0, dataclasses.replace(ask, context=per_slot * (failed["slots"] or 1)))
    for t in tries:
        out = _predict(t, base, row)
        if out["predicted_tok_s"] is not None:
            said = (f"KV type not given: f16 does not fit ({failed['why_not'][len('does not fit: '):]}); predicted with "
                    f"{t.kv}, the largest llama.cpp type that does" if t.kv != ask.kv else
                    f"context not given: the default {failed['context']:,} does not fit; predicted at {t.context:,}, "
                    "the longest that does")
            out["notes"].insert(0, said)
            return out
    return failed


def _predict(ask: Ask, base, row: int) -> dict:
    import contextlib

    from lab.model import models, weights as weights_mod
    from lab.predict import kvcache, memory_plan, profile_speed, public_check

    out = _blank(ask, row)
    try:
        card = resolve_card(ask.gpu) if ask.gpu is not None or base is None else _card_of(base)
    except UnknownCard as exc:
        return {**out, "why_not": str(exc)}
    a, notes = filled(ask, base)
    if a.split == "tensor" and a.gpus > 1 and ask.link is None:  # the lab's own profile for this pair names its link
        from lab.predict import links

        a.link = links.default_link(card["id"], a.gpus, base) or a.link or DEFAULT_LINK
    out.update({k: getattr(a, k) for k in ASKED}, gpu=ask.gpu or card["name"], card=card["name"], card_id=card["id"],
               notes=notes)
    bad = problems(a)
    key = card["arch"]
    if a.engine == "llama.cpp" and not bad:
        key, more, wrong = backend_plan(a, card)
        notes += more
        bad += wrong
    if bad:
        return {**out, "why_not": "bad value: " + "; ".join(bad)}
    if a.os == "windows":
        notes.append(windows_note(card))
    if card.get("laptop"):
        notes.append(laptop_note(card))
    weights_gb, mix_quant, quant_note = quant_plan(a)
    if quant_note:
        notes.append(quant_note)
    try:
        prof = build_profile(a, card, base, mix_quant)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError: the schema's own message
        return {**out, "why_not": f"not a set-up the lab's profile schema accepts: {_schema_error(exc)}"}
    if a.engine == "llama.cpp" and a.split == "tensor" and a.kv not in ("f16", "bf16", "auto"):
        notes.append(tensor_kv_note(a.kv))
    from lab.predict import routes

    warning = routes.split_warning(a.engine, a.split, a.spec == "draft-mtp")  # the same words as lab plan's routes
    if warning:
        notes.insert(0, warning)
    arch = models.arch_for(prof)
    stated = (contextlib.nullcontext() if weights_gb is None else weights_mod.stated_download(
        round(weights_gb * 1e9), f"{'stated' if a.weights_gb else 'sized'}: a {weights_gb:g} GB download "
                                 "(lab predict weights_gb)"))
    with stated:
        parts = weights_mod.profile_weight_parts(prof, arch)
        if parts["read_bytes"] <= 0:
            return {**out, "why_not": f"bad value: weights_gb {a.weights_gb:g} is not more than what a {a.quant} file "
                                      f"holds besides its layers (MTP block and token embedding, "
                                      f"{(parts['mtp_bytes'] + parts['embedding_bytes']) / 1e9:.2f} GB)"}
        rl = profile_speed.roofline_for(prof, context_tokens=a.depth)
        mem = memory_plan.plan_memory(prof, arch)
    bpt, bw = rl["bytes_per_token"], float(prof.gpu_memory_bandwidth_gb_s)
    model = {"weights_file_gb": parts["file_bytes"] / 1e9, "weights_basis": parts["basis"],
             "bytes_per_token_gb": bpt / 1e9 if bpt else None,
             "weights_read_gb": (rl["weights_read_bytes"] or 0) / 1e9, "kv_and_state_read_gb": (rl["kv_bytes_per_seq"] or 0) / 1e9,
             "bandwidth_gb_s_per_card": bw, "read_definition": "lab/data/calibration.yaml read_per_token"}
    if a.engine == "llama.cpp":
        _, how = fraction_from(key)
        if how.startswith("FALLBACK"):
            notes.append(fallback_note(card))
        ptm = roofline.per_token_model()
        if bpt and key != rl["per_token_gpu_arch"]:  # another backend: the same model at its own calibration
            rl = {**rl, "per_token_fraction": ptm.fraction_for(key), "per_token_fixed_ms": ptm.fixed_for(
                rl["per_token_family"], key), "predicted_decode_tok_s": ptm.predict_tok_s(bpt, bw, "datasheet",
                                                                                      rl["per_token_family"], key)}
        model.update(bandwidth_fraction=rl["per_token_fraction"], fraction_from=how, fixed_ms_per_token=rl["per_token_fixed_ms"],
                     family=rl["per_token_family"], calibration=f"per-token model: {rl['per_token_how']}",
                     calibration_key=key)
        if a.split == "tensor":
            tp = public_check.tensor_tok_s(bpt, card["id"], a.link, a.gpus, key=key)
            plain, ceiling = tp.pessimistic_tok_s, roofline.decode_ceiling_tok_s(bw * a.gpus, bpt)
            model.update(link=a.link, comm_ms_per_token=tp.comm_ms, optimistic_tok_s=tp.optimistic_tok_s,
                         split_model="lab.predict.tp_model: pessimistic bound (the fixed cost whole on each card), as "
                                     "lab plan's -sm tensor routes")
            if ask.link is None:
                notes.append(link_note(a.link))
        else:
            plain, ceiling = rl["predicted_decode_tok_s"], rl["decode_ceiling_tok_s"]
            if a.split == "layer":
                model["split_model"] = "-sm layer: one card's bandwidth at a time, as lab plan's headline (no hop added)"
    else:
        from lab.predict import vllm_speed

        n_tp = a.gpus if a.split == "tensor" else 1  # pipeline parallel: one card's bandwidth at a time
        k = (a.n_max or vllm_speed.MTP_K) if a.spec == "draft-mtp" else None
        tokens = None
        if k and a.acceptance is not None:
            from lab.predict import speculative_speed

            tokens = speculative_speed.expected_tokens(a.acceptance, k)
        vx = vllm_speed.setup_speed(card["id"], n_tp, a.quant, a.depth, a.kv, a.link, k, tokens)
        plain, ceiling = vx["plain_tok_s"], roofline.decode_ceiling_tok_s(bw * n_tp, vx["bytes_per_token"])
        bpt = vx["bytes_per_token"]
        vm = vllm_speed.model()
        model.update(bytes_per_token_gb=bpt / 1e9, bandwidth_fraction=vx["plain"]["fraction"],
                     fraction_from=vx["plain"]["fraction_from"], fixed_ms_per_token=vm.fixed_ms,
                     calibration=f"vLLM model: {vm.how}", vllm=vx["how"], source=vllm_speed.SOURCE)
        if n_tp > 1:
            model.update(link=a.link or vllm_speed.DEFAULT_LINK, comm_ms_per_token=vx["plain"]["comm_ms"])
        if vx["mtp"]:
            model["vllm_mtp"] = {**vx["mtp"], "tokens_from": vx["tokens_from"]}
        if base is not None and base.engine_build:  # the profile names the fork: stock vLLM's limits are not its
            notes.append(f"{base.engine_build}: the community Volta fork of vLLM the profile names "
                         "(lab/data/routes.yaml fork); the vLLM model is fitted on its published rows")
        else:
            notes += vllm_speed.stock_vllm_notes(card["arch"], vx["format"])
    tensor = f" over {a.link}" if a.link and a.split == "tensor" else ""
    how = (f"-sm {a.split}{tensor}" if a.engine == "llama.cpp" else f"{'tensor' if a.split == 'tensor' else 'pipeline'} "
           f"parallel {a.gpus}") if a.gpus > 1 else "one card"
    mtp = f", draft-mtp n-max {a.n_max or 'best of 1-4'}" if a.spec == "draft-mtp" else ""
    on = f" on {a.backend}" if a.engine == "llama.cpp" and key != card["arch"] else ""
    out.update(route=f"{a.engine}{on}, {a.gpus} x {card['name']}, {how}{mtp}, {a.quant}, {a.kv} KV", notes=notes,
               plain_tok_s=plain, ceiling_tok_s=ceiling, model=model,
               ceiling=(f"{bw * (a.gpus if a.split == 'tensor' else 1):g} GB/s / {bpt / 1e9:.2f} GB read per token "
                        "(roofline, plain decode)") if bpt else rl["reason"])
    memory, why = memory_verdict(a, mem, lambda: owners_overhead(predict, Ask))
    out["memory"] = memory
    if memory.get("tight"):
        notes.append(memory["tight"])
    n_seq = kvcache.context_per_request(a.engine, a.context, a.slots)
    if a.depth > n_seq:
        why = why or f"depth {a.depth:,} is beyond one slot's context ({n_seq:,}: {a.context:,} over {a.slots} slot(s))"
    if a.depth >= DEEP_TOKENS:
        notes.append(depth_note(a.depth, bpt, rl["kv_bytes_per_seq"], card["id"]))
    tok_s = plain
    if plain is None:
        why = why or (rl["reason"] or "no prediction")
    elif a.spec == "draft-mtp":
        if a.engine != "llama.cpp":
            tok_s = vx["tok_s"]
            out["route"] = out["route"].replace(f"draft-mtp n-max {a.n_max or 'best of 1-4'}",
                                                f"MTP ({vllm_speed.MTP_K if not a.n_max else a.n_max} speculative tokens)")
            why = why or (None if tok_s else "vLLM MTP: no draft cost or tokens per step (lab.predict.vllm_speed)")
        else:
            tok_s, model["mtp"], mtp_why = mtp_answer(a, card, plain, key)
            why = why or mtp_why
            if model["mtp"]:
                out["route"] = out["route"].replace("n-max best of 1-4", f"n-max {model['mtp']['n_max']}")
            notes.append(f"the MTP block ({parts['mtp_bytes'] / 1e9:.2f} GB) loads only with --spec-type draft-mtp: "
                         "the memory fit does not count it (as lab plan)")
            if a.p_min:
                gated = public_check.mtp_check()["gated"]
                notes.append(f"p_min {a.p_min:g} is not modelled: the MTP step model drafts n-max tokens every step "
                             "(--spec-draft-p-min 0, the pinned llama.cpp's default, common/common.h); this is that. "
                             f"On the {gated['n']} published gated rows it is off by median {gated['median_abs_error']:.0%}, "
                             f"max {gated['max_abs_error']:.0%} (`.venv/bin/python -m lab predict --validate`)")
    elif a.n_max or a.acceptance is not None or a.p_min:
        notes.append("n_max, p_min and acceptance are ignored: spec none")
    out["predicted_tok_s"] = None if why else tok_s
    out["why_not"] = why
    return out


# ---------------------------------------------------------------- the route the lab recommends for a set-up
def best_route(ask: Ask, base=None) -> dict:
    """The fastest route the lab recommends for a set-up, as `lab plan`'s route table ranks them: the ask predicted
    plain and with MTP (llama.cpp draft-mtp at the sweep's best n-max; vLLM's MTP at the fork's k) by `predict`, the
    faster one that has a prediction. {"best": predict()'s answer, "plain": ..., "mtp": ... | None, "name": "the
    route in words", "mtp_chosen": bool}. An ask that names its own speculation keeps it (no alternative)."""
    import dataclasses as dc

    if ask.spec is not None or ask.n_max is not None or ask.acceptance is not None:
        one = predict(ask, base)
        return {"best": one, "plain": None, "mtp": None, "name": one["route"], "mtp_chosen": one["spec"] == "draft-mtp"}
    plain = predict(dc.replace(ask, spec="none"), base)
    mtp = predict(dc.replace(ask, spec="draft-mtp"), base)
    use_mtp = bool(mtp["predicted_tok_s"]) and (not plain["predicted_tok_s"]
                                                or mtp["predicted_tok_s"] > plain["predicted_tok_s"])
    best = mtp if use_mtp else plain
    return {"best": best, "plain": plain, "mtp": mtp, "name": best["route"] or str(ask.gpu), "mtp_chosen": use_mtp}
