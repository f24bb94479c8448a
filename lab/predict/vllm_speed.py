"""vLLM decode speed of Qwen3.8-27B on a card, plain and with MTP: the lab's one vLLM speed model. `lab predict
--engine vllm`, `lab plan`'s fork routes (lab.predict.routes) and `lab predict --validate` all call `setup_speed` /
`plain` / `mtp`; nothing else computes a vLLM speed.

Plain decode, one stream, tensor parallel over n cards (the fork's TP rows; lab.predict.tp_model's shape):

    t = bytes read per token ÷ (n × fraction[arch] × datasheet bandwidth) + fixed_ms + all-reduces(n, link)

* bytes read per token: the checkpoint's weights less the token embedding (lab.model.weights.decode_read_bytes at
  the row's format: AWQ-INT4 or FP8) + the KV cache at the row's depth and KV type + the Gated DeltaNet state
  (lab.predict.kvcache), the definition every ceiling of the lab uses (calibration.yaml read_per_token);
* all-reduces: lab.predict.tp_model (2 per layer + 1, fp16 hidden state, over the link of lab/data/gpu_links.yaml);
* fixed_ms (vLLM's per-token cost that no byte explains: the scheduler, Python, sampling, the recurrent layers'
  small kernels) and fraction[arch] (the achieved share of the datasheet bandwidth, TurboMind's AWQ/FP8 kernels on
  Volta) are fitted (`fit`, least squares on log speed) on the fork's shallow plain rows of lab/data/public_speed.yaml
  and on the lab's own measured vLLM step costs (lab/data/calibration.yaml vllm_step_costs, once a GPU run fills
  them). An architecture without vLLM rows takes the llama.cpp per-token model's fraction for it (said so).

MTP (vLLM's speculative config, method mtp, num_speculative_tokens k):

    step_ms(k) = t + k × draft_ms ;  tok/s = tokens per step ÷ step_ms

draft_ms (one MTP-head pass + its share of verifying k + 1 tokens) fitted on the fork's shallow MTP rows that publish
tokens per step (vLLM's mean acceptance length, bonus token included) and on measured step costs. Tokens per step
come from the public rows (the fork's natural-output workloads: ~3.9 at k = 4).

Held out (`check`): each row predicted by a fit without it; with fewer than two plain rows left the fraction falls back
to the per-token model's for the architecture. Pure: lab/data in, numbers out.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re

from lab.core import facts
from lab.predict import public_speed, tp_model

MODEL_ID = "qwen3.8-27b"
DEFAULT_QUANT = "AWQ-INT4"  # the fork's TP2 route (lab/data/routes.yaml fork-tp2)
DEFAULT_LINK = "v100-sxm2-nvlink2"  # the fork's rows ran on SXM2 boards (4x PG503, 2x V100 32GB)
MTP_K = 4  # the fork's public MTP rows and its flags (routes.yaml fork mtp_flags): num_speculative_tokens 4
SOURCE = ("lab.predict.vllm_speed: fitted on the fork's shallow rows of lab/data/public_speed.yaml (1Cat-vLLM "
          "RELEASE.md / README) and lab/data/calibration.yaml vllm_step_costs")


@dataclasses.dataclass(frozen=True)
class VllmModel:
    """t = bytes ÷ (n × fraction × bandwidth) + fixed_ms + all-reduces; MTP step = t + k × draft_ms."""

    fixed_ms: float
    fraction_by_arch: dict
    draft_ms: float | None
    plain_rows: tuple
    mtp_rows: tuple
    how: str

    def fraction_for(self, arch: str) -> tuple[float, str]:
        if arch in self.fraction_by_arch:
            return self.fraction_by_arch[arch], f"{arch}, fitted on vLLM rows ({', '.join(self.plain_rows)})"
        from lab.predict import roofline

        return (roofline.per_token_model().fraction_for(arch),
                f"FALLBACK: no vLLM rows of {arch}; the llama.cpp per-token model's {arch} fraction")


# ---------------------------------------------------------------- what a set-up reads
def weights_format(quant: str | None) -> str:
    """The weight format a row or an ask names ("AWQ 4-bit (Qwen3.6-27B-AWQ)" → AWQ-INT4, "FP8 (...)" → FP8, BF16 and
    F16 as themselves; anything else 4-bit AWQ, the fork's TP2 format)."""
    q = (quant or DEFAULT_QUANT).upper()
    for key, fmt in (("FP8", "FP8"), ("GPTQ", "GPTQ-INT4"), ("BF16", "BF16"), ("F16", "F16"), ("FP16", "F16")):
        if key in q:
            return fmt
    return "AWQ-INT4"


def kv_dtype(kv: str | None) -> str:
    """vLLM's KV type as the lab's kvcache names it: fp8 variants are 1 byte, anything else (fp16, auto) 2."""
    return "fp8" if kv and "fp8" in kv.lower() else "f16"


@functools.lru_cache(maxsize=8)
def weights_read_bytes(fmt: str) -> float:
    """Bytes of weights one token reads at `fmt` (lab.model.weights.decode_read_bytes: less the token embedding)."""
    from lab.model import models, weights

    arch = models.stand_in(MODEL_ID)
    return float(weights.decode_read_bytes(fmt, arch, MODEL_ID)[0])


def bytes_per_token(fmt: str, depth: int | None, kv: str | None) -> float:
    """Weights read + KV and state of one sequence at `depth` tokens (a short prompt: 512)."""
    from lab.model import models
    from lab.predict import kvcache

    arch = models.stand_in(MODEL_ID)
    return weights_read_bytes(fmt) + kvcache.kv_cache_bytes(arch, max(int(depth or 512), 1), 1, kv_dtype(kv))


def comm_ms(n_gpus: int, link_id: str | None) -> float:
    """All-reduces per token under tensor parallelism (lab.predict.tp_model; fp16 hidden state, one sequence)."""
    if n_gpus <= 1:
        return 0.0
    link = tp_model.link_from(public_speed.link_figures()[link_id or DEFAULT_LINK])
    per = tp_model.allreduce_s(tp_model.message_bytes(public_speed.HIDDEN, 1, 2), n_gpus, link)
    return tp_model.allreduces_per_token(public_speed.N_LAYERS) * per * 1e3


# The lowest compute capability of each architecture (NVIDIA's CUDA GPUs list): what stock vLLM's kernels are checked
# against (lab/data/compat_rules.yaml quant_format_min_capability).
ARCH_CAPABILITY = {"pascal": 60, "volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}


def stock_vllm_notes(arch: str, fmt: str) -> list[str]:
    """Whether stock vLLM loads `fmt` on a card of `arch` (compat_rules.yaml quant_format_min_capability, the rule
    `lab plan` judges a profile with); on Volta the route is the community fork (routes.yaml fork), whose rows the
    model is fitted on."""
    rule = next(r for r in facts.load("compat_rules")["rules"] if r["id"] == "quant_format_min_capability")
    need = (rule["formats"].get(fmt) or {}).get("min")
    cc = ARCH_CAPABILITY.get(arch)
    if need is None or cc is None or cc >= need:
        return []
    fork = facts.load("routes")["fork"]
    return [f"stock vLLM cannot load {fmt} on this card: it needs compute capability {need / 10:.1f}, {arch} has "
            f"{cc / 10:.1f} (lab/data/compat_rules.yaml {rule['id']}; `lab plan` says the same for a profile); this "
            f"is the community fork's speed ({fork['name']}, {fork['repository']}: TurboMind SM70 kernels), the "
            "route lab plan's fork routes name"]


# ---------------------------------------------------------------- the fit's points
def _arch(gpu_id: str) -> str:
    return public_speed.gpu_specs()[gpu_id]["arch"]


def _bw(gpu_id: str) -> float:
    return float(public_speed.gpu_specs()[gpu_id]["bandwidth_gb_s"])


def tokens_per_step(row: public_speed.Row) -> float | None:
    """vLLM's mean acceptance length (tokens per step, bonus included) a row publishes ("3.910 tokens per step")."""
    text = (row.speculative.acceptance or "") if row.speculative else ""
    m = re.search(r"(\d+(?:\.\d+)?)\s*tokens per step", text)
    return float(m.group(1)) if m else None


def is_vllm_row(row: public_speed.Row) -> bool:
    return row.engine in ("vLLM", "fork") and row.gpu_id is not None and row.gpu_id in public_speed.gpu_specs()


def row_link(row: public_speed.Row) -> str:
    """The link a vLLM row's cards talk over: its own, else DEFAULT_LINK (the fork's rows ran on SXM2 NVLink boards).
    The fit, the check and `lab predict --validate`'s coverage (lab.predict.card_setup.ask_of) all ask this."""
    return row.link or DEFAULT_LINK


def row_tokens(row: public_speed.Row) -> tuple[int | None, float | None]:
    """(k, tokens per step) a vLLM MTP row ran at: its num_speculative_tokens (MTP_K when unstated) and its
    published mean acceptance length; (None, None) for a plain row."""
    if row.speculative is None:
        return None, None
    return row.speculative.n_max or MTP_K, tokens_per_step(row)


def plain_point(row: public_speed.Row) -> dict:
    return {"id": row.id, "arch": _arch(row.gpu_id), "gpu_id": row.gpu_id, "n": row.gpu_count,
            "bytes": bytes_per_token(weights_format(row.quant), row.depth_tokens, row.kv_type),
            "link": row_link(row), "tok_s": row.decode_tok_s}


def fit_rows(rows: list | None = None) -> tuple[list, list]:
    """(plain, mtp) vLLM rows the fit uses: the fork's/vLLM's rows on a known card, no outlier note, shallower than
    public_speed.DEEP_TOKENS (attention's work at depth is not modelled: such rows are checked, not fitted), measured
    at a tensor-parallel degree (a one-card fork row ran in eager mode or under agent traffic: approximate);
    MTP rows that publish tokens per step."""
    rows = public_speed.load() if rows is None else rows
    ok = [r for r in rows if is_vllm_row(r) and r.outlier is None and (r.depth_tokens or 0) < public_speed.DEEP_TOKENS
          and r.gpu_count > 1]
    return ([r for r in ok if r.speculative is None],
            [r for r in ok if r.speculative is not None and tokens_per_step(r)])


def measured_steps() -> list[dict]:
    """The lab's own vLLM step costs (calibration.yaml vllm_step_costs) that a run has filled in."""
    out = []
    for s in facts.load("calibration")["vllm_step_costs"]["runs"]:
        if s.get("plain_ms") is None or s.get("bytes_per_token") is None:
            continue
        out.append({**s, "arch": _arch(s["gpu_id"])})
    return out


def _plain_ms(bytes_: float, gpu_id: str, n: int, link: str | None, fixed: float, frac: float) -> float:
    return bytes_ / (n * frac * _bw(gpu_id) * 1e9) * 1e3 + fixed + comm_ms(n, link)


def fit(rows: list | None = None, steps: list | None = None) -> VllmModel:
    """The vLLM model fitted on the rows `fit_rows` keeps and the measured `steps` (default: calibration.yaml's
    filled ones). Plain: a grid over the fixed ms (0.01 ms steps) with each architecture's fraction the geometric mean
    its points imply; an architecture with one point only and no second point elsewhere keeps the per-token model's
    fraction and the fixed ms comes from it. MTP: draft_ms the geometric mean of what each MTP row implies at the
    model's plain speed."""
    from lab.predict import roofline

    plain_rows, mtp_rows = fit_rows(rows)
    steps = measured_steps() if steps is None else steps
    # A measured card joins the plain fit once it has two loads (weight formats or depths): one load cannot tell its
    # fraction from the fixed cost, and with a borrowed fraction it would move the fixed cost every card shares (the
    # H100's one FP8 point, 2026-12-07, against Hopper's llama.cpp fraction, which sits at the fit's 1.00 cap). One
    # load is a check of the model instead (`measured_checks`).
    row_pts = [plain_point(r) for r in plain_rows]
    step_pts = [{"id": s["id"], "arch": s["arch"], "gpu_id": s["gpu_id"], "n": int(s.get("tensor_parallel", 1)),
                 "bytes": float(s["bytes_per_token"]), "link": s.get("link"), "tok_s": 1000.0 / float(s["plain_ms"])}
                for s in steps]
    per_arch: dict = {}
    for p in row_pts + step_pts:
        per_arch.setdefault(p["arch"], set()).add(round(p["bytes"] / p["n"] / 1e6))
    own = {a for a, sizes in per_arch.items() if len(sizes) >= 2}  # two loads per card tell fraction from fixed cost
    pts = row_pts + [p for p in step_pts if p["arch"] in own]
    if not pts:
        raise ValueError("the vLLM model needs at least one measured plain row (lab/data/public_speed.yaml fork rows "
                         "or calibration.yaml vllm_step_costs)")
    ptm = roofline.per_token_model()

    def implied(p, c):  # the fraction a point implies at fixed cost c
        left = 1000.0 / p["tok_s"] - c - comm_ms(p["n"], p["link"])
        return p["bytes"] / (p["n"] * _bw(p["gpu_id"]) * 1e9) * 1e3 / left if left > 0 else math.inf

    def fractions(c):
        by: dict = {}
        for p in pts:
            by.setdefault(p["arch"], []).append(implied(p, c))
        return {a: math.exp(sum(math.log(x) for x in v) / len(v)) if all(x < math.inf for x in v) else math.inf
                for a, v in by.items()}

    def fractions_at(c):
        f = {a: v for a, v in fractions(c).items() if a in own}
        return f, {**{a: ptm.fraction_for(a) for a in per_arch}, **f}

    best = None
    for i in range(int(min(1000.0 / p["tok_s"] - comm_ms(p["n"], p["link"]) for p in pts) / 0.01)):
        c = i * 0.01
        frac, every = fractions_at(c)
        if frac and max(frac.values()) > 1.0:
            continue
        err = sum(math.log(_plain_ms(p["bytes"], p["gpu_id"], p["n"], p["link"], c, every[p["arch"]])
                           * p["tok_s"] / 1000.0) ** 2 for p in pts)
        if best is None or err < best[0]:
            best = (err, c, frac)
    if best is None:
        raise ValueError("no fixed cost keeps the vLLM rows' achieved bandwidth at or below the datasheet figure")
    _, fixed, frac = best
    partial = VllmModel(round(fixed, 4), frac, None, tuple(p["id"] for p in pts), (), "")
    drafts = []
    for r in mtp_rows:
        t = plain(bytes_per_token(weights_format(r.quant), r.depth_tokens, r.kv_type), r.gpu_id, r.gpu_count,
                  row_link(r), partial)["ms"]
        k, tokens = row_tokens(r)
        drafts.append((1000.0 * tokens / r.decode_tok_s - t) / k)
    for s in steps:
        for k, ms in (s.get("mtp_ms_per_step") or {}).items():
            if ms is not None:
                drafts.append((float(ms) - float(s["plain_ms"])) / int(k))
    drafts = [d for d in drafts if d > 0]
    draft = math.exp(sum(math.log(d) for d in drafts) / len(drafts)) if drafts else None
    how = (f"vLLM model fitted on {len(pts)} plain point(s) ({', '.join(p['id'] for p in pts)}): fixed "
           f"{fixed:.2f} ms per token, " + (", ".join(f"{a} {v:.2f} of datasheet bandwidth" for a, v in sorted(frac.items()))
                                           or "bandwidth fraction from the per-token model (FALLBACK)")
           + (f"; MTP draft {draft:.2f} ms per drafted token from {len(drafts)} point(s) "
              f"({', '.join(r.id for r in mtp_rows)})" if draft else "; MTP: no rows with tokens per step"))
    return VllmModel(round(fixed, 4), frac, draft, partial.plain_rows, tuple(r.id for r in mtp_rows), how)


def measured_checks() -> list[dict]:
    """The lab's measured vLLM steps the fit leaves out (one load of their card), each against the model:
    {id, gpu_id, weights, measured_ms, predicted_ms, error_pct}."""
    used = set(model().plain_rows)
    out = []
    for s in measured_steps():
        if s["id"] in used:
            continue
        ms = plain(float(s["bytes_per_token"]), s["gpu_id"], int(s.get("tensor_parallel", 1)), s.get("link"))["ms"]
        out.append({"id": s["id"], "gpu_id": s["gpu_id"], "weights": s.get("weights"), "measured_ms": s["plain_ms"],
                    "predicted_ms": ms, "error_pct": 100.0 * (ms / float(s["plain_ms"]) - 1.0)})
    return out


def model_archs() -> set[str]:
    """The architectures of the cards the fitted model's points ran on (public rows and measured steps)."""
    rows = {r.id: r for r in fit_rows()[0]}
    return {_arch(rows[i].gpu_id) if i in rows else next(s["arch"] for s in measured_steps() if s["id"] == i)
            for i in model().plain_rows}


@functools.lru_cache(maxsize=1)
def model() -> VllmModel:
    """The model fitted on every row and measured step (`fit`)."""
    return fit()


# ---------------------------------------------------------------- predictions
def plain(bytes_: float, gpu_id: str, n_gpus: int, link: str | None = None, m: VllmModel | None = None) -> dict:
    """One stream's plain decode: {tok_s, ms, weights_ms, fixed_ms, comm_ms, fraction, fraction_from}."""
    m = m or model()
    frac, how = m.fraction_for(_arch(gpu_id))
    w = bytes_ / (n_gpus * frac * _bw(gpu_id) * 1e9) * 1e3
    c = comm_ms(n_gpus, link)
    ms = w + m.fixed_ms + c
    return {"tok_s": 1000.0 / ms, "ms": ms, "weights_ms": w, "fixed_ms": m.fixed_ms, "comm_ms": c, "fraction": frac,
            "fraction_from": how}


def mtp(plain_ms: float, k: int, tokens: float, m: VllmModel | None = None) -> dict | None:
    """MTP at k speculative tokens with `tokens` per step: {tok_s, step_ms, tokens_per_step, k, draft_ms}; None when
    the model has no draft cost."""
    m = m or model()
    if m.draft_ms is None:
        return None
    step = plain_ms + k * m.draft_ms
    return {"tok_s": tokens / step * 1000.0, "step_ms": step, "tokens_per_step": tokens, "k": k,
            "draft_ms": m.draft_ms}


def published_tokens_per_step(gpu_id: str | None = None, rows: list | None = None) -> tuple[float | None, list[str]]:
    """(mean tokens per step, row ids) of the shallow vLLM MTP rows (the card's own first): natural workloads, not
    the fixed long-context gates."""
    rows = public_speed.load() if rows is None else rows
    cand = [r for r in rows if is_vllm_row(r) and r.speculative and tokens_per_step(r)
            and (r.depth_tokens or 0) < public_speed.DEEP_TOKENS and r.outlier is None]
    if gpu_id:
        mine = [r for r in cand if public_speed.same_card(r.gpu_id, gpu_id)]
        cand = mine or cand
    if not cand:
        return None, []
    return sum(tokens_per_step(r) for r in cand) / len(cand), [r.id for r in cand]


def setup_speed(gpu_id: str, n_gpus: int, quant: str | None = None, depth: int | None = None, kv: str | None = None,
                link: str | None = None, mtp_k: int | None = None, tokens: float | None = None) -> dict:
    """THE answer for a vLLM set-up (tensor parallel over n_gpus): {tok_s, plain_tok_s, plain: plain(), mtp: mtp() |
    None, bytes_per_token, format, tokens_from, how}. `mtp_k`: speculative tokens (None: plain); `tokens`: tokens per
    step (default: the public rows', `published_tokens_per_step`)."""
    fmt = weights_format(quant)
    b = bytes_per_token(fmt, depth, kv)
    p = plain(b, gpu_id, n_gpus, link)
    how = (f"{b / 1e9:.2f} GB/token ({fmt}) ÷ ({n_gpus} x {p['fraction']:.2f} x {_bw(gpu_id):g} GB/s) = "
           f"{p['weights_ms']:.2f} ms + fixed {p['fixed_ms']:.2f} ms + all-reduces {p['comm_ms']:.2f} ms")
    if p["fraction_from"].startswith("FALLBACK"):  # a card no vLLM row or measured step covers (Hopper until a run)
        mine = [m for m in measured_checks() if m["gpu_id"] == gpu_id]
        how += (f"; {p['fraction_from']}, the fixed ms fitted on {', '.join(sorted(model_archs()))} vLLM rows: "
                + (f"one measured load of this card checks it ({mine[0]['id']}: {mine[0]['measured_ms']} ms a token "
                   f"at {mine[0]['weights']}, the model {mine[0]['predicted_ms']:.2f} ms, {mine[0]['error_pct']:+.1f} %); "
                   "a second load would give the card its own fraction" if mine
                   else "no vLLM measurement of this card yet"))
    out = {"tok_s": p["tok_s"], "plain_tok_s": p["tok_s"], "plain": p, "mtp": None, "bytes_per_token": b,
           "format": fmt, "tokens_from": None, "how": how}
    if mtp_k:
        ids = []
        if tokens is None:
            tokens, ids = published_tokens_per_step(gpu_id)
            if tokens and mtp_k != MTP_K:  # the rows publish k = 4: the same per-draft acceptance at k drafts
                from lab.predict import speculative_speed

                tokens = speculative_speed.expected_tokens(speculative_speed.acceptance_for(tokens, MTP_K), mtp_k)
        x = mtp(p["ms"], mtp_k, tokens, None) if tokens else None
        if x:
            out.update(tok_s=x["tok_s"], mtp=x, tokens_from=", ".join(ids) or "given",
                       how=f"{p['tok_s']:.1f} plain; MTP {mtp_k}: {tokens:.2f} tok/step ÷ ({p['ms']:.2f} + {mtp_k} x "
                           f"{x['draft_ms']:.2f} ms draft) ({', '.join(ids) or 'given'})")
        else:
            out.update(tok_s=None, how=how + "; MTP: no tokens per step or draft cost to predict it")
    return out


def row_prediction(row: public_speed.Row, m: VllmModel | None = None) -> float:
    """A public vLLM row's tok/s by the model (its own tokens per step for an MTP row)."""
    p = plain(bytes_per_token(weights_format(row.quant), row.depth_tokens, row.kv_type), row.gpu_id, row.gpu_count,
              row_link(row), m)
    if row.speculative is None:
        return p["tok_s"]
    x = mtp(p["ms"], *row_tokens(row), m)
    return x["tok_s"] if x else float("nan")


def check(rows: list | None = None) -> dict:
    """Every predictable vLLM row (fork rows on a known card, plain or with tokens per step) against the model:
    in sample, and held out (the row, and every row of its card when there are other cards, out of the fit).
    {"rows": [{id, group: plain|mtp|depth, n_gpus, mtp, published, in_sample, held_out, *_error, held_out_how}],
     "summary": {group: {"in_sample", "held_out"}}}."""
    from lab.predict import public_check

    rows = public_speed.load() if rows is None else rows
    m = fit(rows)
    # the cards with vLLM figures: the public rows' and the lab's own measured steps' that the fit uses (a card with
    # two measured loads makes two cards, and every V100 row is then predicted from a fit without any V100 row)
    cards = {public_speed.gpu_specs()[r.gpu_id]["arch"] for r in rows if is_vllm_row(r)} | {
        s["arch"] for s in measured_steps() if s["id"] in m.plain_rows}
    out = []
    for r in rows:
        if not is_vllm_row(r) or r.outlier is not None or r.gpu_count < 2:
            continue
        if r.speculative is not None and not tokens_per_step(r):
            continue
        group = "depth" if (r.depth_tokens or 0) >= public_speed.DEEP_TOKENS else \
            "mtp" if r.speculative is not None else "plain"
        other_cards = len(cards) > 1
        kept = [x for x in rows if x.id != r.id and not (other_cards and x.gpu_id and public_speed.same_card(
            x.gpu_id, r.gpu_id))]
        try:
            held = fit(kept)
            h = row_prediction(r, held)
            how = ("card left out" if other_cards else "row left out") + f": {held.how}"
        except ValueError as exc:
            h, how = float("nan"), f"cannot refit without it: {exc}"
        pred = row_prediction(r, m)
        out.append({"id": r.id, "group": group, "n_gpus": r.gpu_count, "mtp": r.speculative is not None,
                    "published": r.decode_tok_s,
                    "in_sample": pred, "held_out": h, "in_sample_error": pred / r.decode_tok_s - 1,
                    "held_out_error": h / r.decode_tok_s - 1, "held_out_how": how})
    summary = {g: {k: public_check.summary([x[f"{k}_error"] for x in out if x["group"] == g
                                            and not math.isnan(x[f"{k}_error"])]) for k in ("in_sample", "held_out")}
               for g in ("plain", "mtp", "depth")}
    return {"rows": out, "summary": summary, "fit": m.how}


def held_out_plain_error(n_gpus: int, result: dict | None = None) -> float | None:
    """The largest |held-out error| of the plain (no MTP) rows at `n_gpus` cards: the band `lab plan` puts on a vLLM
    prediction (None without such a row)."""
    rows = (result or check())["rows"]
    errs = [abs(x["held_out_error"]) for x in rows if not x["mtp"] and x["n_gpus"] == n_gpus
            and not math.isnan(x["held_out_error"])]
    return max(errs) if errs else None


def check_text(result: dict) -> str:
    """The vLLM check as lines for `lab predict --validate`."""
    lines = ["vLLM model (lab.predict.vllm_speed) on the fork's published rows:", f"  {result['fit']}"]
    for x in result["rows"]:
        held = ("held out: none (the only row of its kind in the fit)" if math.isnan(x["held_out"])
                else f"held out {x['held_out']:.1f} ({x['held_out_error']:+.0%})"
                + ("" if x["group"] != "depth" else " (not fitted: checked only)"))
        lines.append(f"  {x['id']} [{x['group']}, TP{x['n_gpus']}]: published {x['published']:g}, in sample "
                     f"{x['in_sample']:.1f} ({x['in_sample_error']:+.0%}), {held}")
    lines.append("  held out: each row out of the fit (one card only, the V100: no card can be left out until "
                 "calibration.yaml vllm_step_costs holds another); depth rows (8,192+ tokens) are checked, not fitted")
    return "\n".join(lines)


__all__ = ["VllmModel", "fit", "model", "plain", "mtp", "setup_speed", "check", "check_text", "weights_format",
           "bytes_per_token", "published_tokens_per_step", "row_prediction", "row_link", "row_tokens", "tokens_per_step", "stock_vllm_notes", "held_out_plain_error", "SOURCE"]
