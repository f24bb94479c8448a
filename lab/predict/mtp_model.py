"""MTP (llama.cpp --spec-type draft-mtp) decode speed of Qwen3.8-27B on a card, predicted as
lab.predict.speculative_speed defines it: speed(n, r) = tokens per step ÷ step cost(n). The ONE MTP speed model:
lab plan (lab.predict.plan_speeds), the V100 routes (lab.predict.routes), the claims ledger and the public check
(lab.predict.public_check.mtp_check) all call `predict` / `step_over_plain`.

Step cost, on physical grounds (lab/data/calibration.yaml `mtp_step_model`):

    step_ms(n) = plain_ms + n × (head_ms + verify_ms[arch])

* plain_ms: the card's plain ms per token (the per-token model: fixed ms + bytes ÷ achieved bandwidth).
* head_ms = HEAD_FRACTION × (plain_ms − fixed ms): one MTP-head pass reads the MTP block and the shared output
  matrix (lab.model.quant_targets.gguf_parts, Q4_K_M: 0.26 + 1.04 GB = 8.3 % of the 15.8 GB a plain token reads),
  at the card's achieved bandwidth. Computed, not fitted.
* verify_ms[arch]: what each extra token of the n + 1-token verification batch (and the draft's bookkeeping) adds,
  in ms - one figure per architecture, fitted (`fit`) on the public draft-mtp rows of the budget cards plus the
  lab's H200 steps (acceptance 0 on random weights, the pure step cost). Fitted in ms, not as a share of a plain
  token: the data say so - a 4090 and a 4060 Ti (3.5x apart in plain ms) both pay ≈ 3 ms per verified token,
  where a share of plain ms would need 0.13 and 0.06. It falls by generation (Volta > Ampere > Ada ≈ Hopper >
  Blackwell) and does NOT follow compute per byte (the 5060 Ti, half the 4090's compute per byte, pays less):
  so no cross-architecture formula is claimed, and a card of an architecture without rows takes the most
  expensive fitted figure (`fallback`: the model then under- rather than over-rates MTP).

Tokens per step = 1 + r × n with r the acceptance RATE (accepted ÷ drafted, what llama-server's log and timings
report and what the public rows publish) and n drafts per step (the pinned llama.cpp's --spec-draft-p-min defaults
to 0, common/common.h: a draft is never cut short). r comes from lab/data/public_speed.yaml's draft-mtp rows at
that n-max: same card (same architecture and bandwidth) first, then a short prompt (acceptance depends on the
content: the V100's 31k-token document gives 0.88 at n-max 2 where its short prose gives 0.75), then the same split
mode; the mean of the best-ranked rows, their ids kept.
"""
from __future__ import annotations

import functools
import math
import re

from lab.core import facts
from lab.predict import public_speed, speculative_speed

N_VALUES = (1, 2, 3, 4)  # the n-max values a sweep offers (the H200 measured these)
MODEL_ID = "qwen3.8-27b"


def step_data() -> dict:
    """lab/data/calibration.yaml mtp_step_costs (the H200's measured draft-mtp steps)."""
    return facts.load("calibration")["mtp_step_costs"]


def step_model() -> dict:
    """lab/data/calibration.yaml mtp_step_model: {verify_ms: {arch: ms}, ...} (fitted by `fit`, with its source)."""
    return facts.load("calibration")["mtp_step_model"]


@functools.lru_cache(maxsize=1)
def head_fraction() -> float:
    """Bytes one MTP-head pass reads (the MTP block + the output matrix) ÷ bytes a plain token reads (the file less
    the token embedding and the MTP block), Qwen3.8-27B at Q4_K_M (lab.model.quant_targets.gguf_parts)."""
    from lab.model import quant_targets

    p = quant_targets.gguf_parts(MODEL_ID, "Q4_K_M")
    return (p["mtp"] + p["output"]) / (p["file"] - p["token_embd"] - p["mtp"])


@functools.lru_cache(maxsize=32)
def fixed_ms(arch: str | None = None) -> float:
    """The per-token model's fixed ms per token on a card of `arch` (lab.predict.roofline; the part of plain ms no
    byte is read in: the shared cost, or an architecture's own where a controlled pair measured it)."""
    from lab.predict import roofline

    return roofline.per_token_model().fixed_for(public_speed.FAMILY, arch)


def fixed_for(arch: str, params: dict | None = None) -> float:
    """The fixed ms `params` carry for `arch` ("fixed_ms": one figure, or {"default": ms, arch: ms} as
    roofline.PerTokenModel.fixed_by_arch gives it: a refitted per-token model's), else the lab's (`fixed_ms`)."""
    f = params.get("fixed_ms") if params else None
    if f is None:
        return fixed_ms(arch)
    return float(f.get(arch, f["default"])) if isinstance(f, dict) else float(f)


def verify_ms_for(arch: str, params: dict | None = None) -> tuple[float, str]:
    """(ms per verified draft token, the architecture it was fitted on): the card's own architecture, else the most
    expensive fitted one (`fallback`)."""
    v = {a: float(x) for a, x in (params or step_model())["verify_ms"].items()}
    if arch in v:
        return v[arch], arch
    worst = max(v, key=v.get)
    return v[worst], f"{worst} (no {arch} rows)"


def step_over_plain(n: int, plain_tok_s: float, arch: str, params: dict | None = None) -> tuple[float, str]:
    """(ms per draft-mtp step at n-max n ÷ plain ms per token, the architecture verify_ms came from):
    1 + n × (head_ms + verify_ms[arch]) ÷ plain_ms. `params` may carry "fixed_ms", the per-token model's fixed cost
    it goes with (a refit's, `fixed_for`; default: the lab's per-token model)."""
    plain_ms = 1000.0 / plain_tok_s
    verify, basis = verify_ms_for(arch, params)
    fixed = fixed_for(arch, params)
    head = head_fraction() * max(0.0, plain_ms - fixed)
    return 1 + n * (head + verify) / plain_ms, basis


def fit_verify_ms(points: list[dict], fixed: float | None = None) -> float | None:
    """The verify_ms minimising the squared log error of the predicted speed over `points` ({n, rate, plain_tok_s,
    tok_s}: a public row with its predicted plain speed, or an H200 step with rate 0 and its measured plain speed);
    golden-section search on 0-30 ms (the error is convex in it). `fixed`: the per-token model's fixed ms the plain
    speeds came from (default the lab's). None without points."""
    if not points:
        return None

    def loss(v):
        return sum(math.log(tok_s(p["plain_tok_s"], p["n"], p["rate"], "-", {"verify_ms": {"-": v}, "fixed_ms": fixed})
                            / p["tok_s"]) ** 2 for p in points)

    lo, hi = 0.0, 30.0
    for _ in range(80):
        a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        lo, hi = (lo, b) if loss(a) < loss(b) else (a, hi)
    return (lo + hi) / 2


def fit(points: list[dict], fixed: float | dict | None = None) -> dict:
    """{"verify_ms": {arch: ms}} fitted per architecture on `points` (each with an "arch"); with `fixed` (a refitted
    per-token model's fixed ms, which its plain speeds came from: one figure or roofline.PerTokenModel.fixed_by_arch)
    also {"fixed_ms": fixed}, for step_over_plain."""
    ms = {"fixed_ms": fixed} if fixed is not None else None
    out = {"verify_ms": {a: fit_verify_ms([p for p in points if p["arch"] == a], fixed_for(a, ms))
                         for a in sorted({p["arch"] for p in points})}}
    return {**out, "fixed_ms": fixed} if fixed is not None else out


def h200_points(data: dict | None = None) -> list[dict]:
    """The lab's H200 draft-mtp steps as fit points: acceptance 0, so tok/s = 1000 ÷ ms per step."""
    d = data or step_data()
    return [{"id": f"h200-mtp-n{n}", "arch": "hopper", "gpu_id": "h200", "n": int(n), "rate": 0.0,
             "plain_tok_s": 1000.0 / float(d["plain_ms"]), "tok_s": 1000.0 / float(ms)}
            for n, ms in d["ms_per_step"].items()]


def acceptance_rate(row: public_speed.Row) -> float | None:
    """The acceptance rate (accepted ÷ drafted) a row publishes, as one number: an aggregate in parentheses
    ("0.73-0.87 (0.80)", "sweep: 0.66") or a count ratio ("216/249") first, else the midpoint of a range, else the
    single figure; None when there is none or it is a vLLM tokens-per-step figure."""
    text = (row.speculative.acceptance or "") if row.speculative else ""
    if not text or "tokens per step" in text:
        return None
    if m := re.search(r"\((?:sweep:\s*)?(0?\.\d+|1\.0*)\)", text) or re.search(r"sweep:\s*(0?\.\d+)", text):
        return float(m.group(1))
    if m := re.search(r"(\d+)/(\d+)", text):
        return int(m.group(1)) / int(m.group(2))
    if m := re.match(r"\s*(0?\.\d+)\s*-\s*(0?\.\d+)", text):
        return (float(m.group(1)) + float(m.group(2))) / 2
    m = re.match(r"\s*(0?\.\d+|1(?:\.0*)?)\b", text)
    return float(m.group(1)) if m else None


def is_draft_mtp(row: public_speed.Row) -> bool:
    """A llama.cpp draft-mtp row with a published n-max (the set-up this model describes)."""
    s = row.speculative
    return bool(s and row.engine == "llama.cpp" and s.type.startswith("draft-mtp") and s.n_max)


def is_gated(row: public_speed.Row) -> bool:
    """Drafts gated by --spec-draft-p-min > 0: the model assumes p-min 0 (every step drafts n-max tokens), so such a
    row is checked apart and its acceptance (of the drafts the gate let through) is not used as a card's rate."""
    return bool(row.speculative and (row.speculative.p_min or 0) > 0)


def acceptance_for(gpu_id: str, n: int, split: str, rows: list | None = None) -> tuple[float | None, list[str]]:
    """(mean acceptance rate, row ids) of the best-ranked public draft-mtp rows at n-max n for a card: same card
    first, then a short prompt, then the same split mode; rows with an outlier note or gated drafts (`is_gated`) are
    left out."""
    rows = public_speed.load() if rows is None else rows
    cand = [r for r in rows if is_draft_mtp(r) and r.speculative.n_max == n and r.outlier is None
            and not is_gated(r) and acceptance_rate(r) is not None]
    if not cand:
        return None, []

    def rank(r):
        return (not (r.gpu_id and public_speed.same_card(r.gpu_id, gpu_id)), r.depth_tokens is not None,
                r.split_mode != split)

    best = min(rank(r) for r in cand)
    chosen = [r for r in cand if rank(r) == best]
    return sum(acceptance_rate(r) for r in chosen) / len(chosen), [r.id for r in chosen]


def tok_s(plain_tok_s: float, n: int, rate: float, arch: str, params: dict | None = None) -> float:
    """predict()'s tok_s alone (the fit calls it thousands of times; predict's break-even solve is not needed)."""
    ratio, _ = step_over_plain(n, plain_tok_s, arch, params)
    return speculative_speed.speed_tok_s(speculative_speed.tokens_from_rate(rate, n), ratio * 1000.0 / plain_tok_s)


def predict(plain_tok_s: float, n: int, rate: float, arch: str, params: dict | None = None) -> dict:
    """One stream's MTP speed at n-max n from the card's plain speed, its architecture and an acceptance rate:
    {n_max, rate, tokens_per_step, step_over_plain, step_ms, step_from, tok_s, break_even_rate}."""
    ratio, basis = step_over_plain(n, plain_tok_s, arch, params)
    step_ms = ratio * 1000.0 / plain_tok_s
    tokens = speculative_speed.tokens_from_rate(rate, n)
    return {"n_max": n, "rate": rate, "tokens_per_step": tokens, "step_over_plain": ratio, "step_ms": step_ms,
            "step_from": basis, "tok_s": speculative_speed.speed_tok_s(tokens, step_ms),
            "break_even_rate": speculative_speed.break_even(step_ms, 1000.0 / plain_tok_s, n)["rate"]}


def sweep(plain_tok_s: float, gpu_id: str, split: str, rows: list | None = None) -> list[dict]:
    """predict() at each measured n-max with the card's acceptance (acceptance_for), its row ids under "rows"."""
    rows = public_speed.load() if rows is None else rows
    params, arch = step_model(), public_speed.gpu_specs()[gpu_id]["arch"]
    out = []
    for n in N_VALUES:
        rate, ids = acceptance_for(gpu_id, n, split, rows)
        if rate is not None:
            out.append({**predict(plain_tok_s, n, rate, arch, params), "rows": ids})
    return out


def best_of(sweep: list[dict]) -> dict:
    """The fastest point of a predicted sweep (`sweep`): the n-max every view recommends (lab plan's routes, lab
    predict), so the figure shown beside it is the largest of the sweep shown."""
    return max(sweep, key=lambda x: x["tok_s"])


def published_best_n(gpu_id: str, split: str, rows: list | None = None) -> dict | None:
    """The fastest n-max of a same-card, same-split, short-prompt public draft-mtp sweep (rows at two or more n-max
    values, no outlier note): {n_max, tok_s, id}; None without such a sweep. A measured sweep on the card beats the
    model's pick."""
    rows = public_speed.load() if rows is None else rows
    same = [r for r in rows if is_draft_mtp(r) and r.speculative.n_max in N_VALUES and r.outlier is None
            and not is_gated(r) and r.gpu_id and public_speed.same_card(r.gpu_id, gpu_id) and r.split_mode == split
            and r.depth_tokens is None]
    if len({r.speculative.n_max for r in same}) < 2:
        return None
    best = max(same, key=lambda r: r.decode_tok_s)
    return {"n_max": best.speculative.n_max, "tok_s": best.decode_tok_s, "id": best.id}


def flags(n: int) -> str:
    """llama-server's flags for MTP at n-max n."""
    return f"--spec-type draft-mtp --spec-draft-n-max {n}"


SOURCE = ("lab/data/calibration.yaml mtp_step_model (verify ms per drafted token by architecture, fitted on "
          "lab/data/public_speed.yaml's draft-mtp rows + the H200's mtp_step_costs) and the card's predicted plain "
          "speed; acceptance from lab/data/public_speed.yaml")

__all__ = ["step_data", "step_model", "head_fraction", "fixed_ms", "fixed_for", "verify_ms_for", "step_over_plain",
           "fit_verify_ms", "fit", "h200_points", "acceptance_rate", "is_draft_mtp", "is_gated", "acceptance_for", "predict",
           "sweep", "best_of", "published_best_n", "flags", "N_VALUES", "SOURCE"]
