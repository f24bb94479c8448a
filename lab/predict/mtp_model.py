"""MTP (llama.cpp --spec-type draft-mtp) decode speed of Qwen3.8-27B on a card the lab has not run, predicted as
lab.predict.speculative_speed defines it: speed(n, r) = tokens per step ÷ step cost(n).

Step cost on the target card = the H200's measured step_over_plain(n) × the card's predicted plain ms per token.
step_over_plain(n) = the lab's H200 ms per draft-mtp step at --spec-draft-n-max n ÷ its plain ms per token
(lab/data/calibration.yaml mtp_step_costs: 1.34 / 1.63 / 1.92 / 2.12 at n = 1..4, on random weights, so acceptance
0 and the step cost is pure). CARRY-OVER ASSUMPTION: the MTP head's passes and the n + 1-token verification batch
scale with the card like one plain token does. It is a hypothesis until a V100 measures its own step cost; the
public rows test it (lab.predict.public_check.mtp_check): it holds on Volta and Ampere at n-max 1-2, Volta's steps
grow costlier than the H200's at n-max 3-4 (the model over-rates them by 15-17 %), and Ada and Blackwell verify
relatively cheaper (under-rated by 8-36 %).

Tokens per step = 1 + r × n with r the acceptance RATE (accepted ÷ drafted, what llama-server's log and timings
report and what the public rows publish) and n drafts per step (the pinned llama.cpp's --spec-draft-p-min defaults
to 0, common/common.h: a draft is never cut short). r comes from lab/data/public_speed.yaml's draft-mtp rows at
that n-max: same card (same architecture and bandwidth) first, then a short prompt (acceptance depends on the
content: the V100's 31k-token document gives 0.88 at n-max 2 where its short prose gives 0.75), then the same split
mode; the mean of the best-ranked rows, their ids kept.
"""
from __future__ import annotations

import re

from lab.core import facts
from lab.predict import public_speed, speculative_speed

N_VALUES = (1, 2, 3, 4)  # the n-max values the H200 measured


def step_data() -> dict:
    """lab/data/calibration.yaml mtp_step_costs (the H200's measured draft-mtp steps)."""
    return facts.load("calibration")["mtp_step_costs"]


def step_over_plain(n: int, data: dict | None = None) -> tuple[float, str]:
    """(H200 ms per step at n-max n ÷ its plain ms per token, "measured" | "modelled"); beyond the measured n the
    step is verify(n + 1) + n × head (lab.predict.speculative_speed.step_cost_ms)."""
    d = data or step_data()
    steps = {int(k): float(v) for k, v in d["ms_per_step"].items()}
    batches = {int(k): float(v) for k, v in d["verification_batch_tok_s"].items()}
    ms, how = speculative_speed.step_cost_ms(n, steps, batches)
    return ms / float(d["plain_ms"]), how


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


def acceptance_for(gpu_id: str, n: int, split: str, rows: list | None = None) -> tuple[float | None, list[str]]:
    """(mean acceptance rate, row ids) of the best-ranked public draft-mtp rows at n-max n for a card: same card
    first, then a short prompt, then the same split mode; rows with an outlier note are left out."""
    rows = public_speed.load() if rows is None else rows
    cand = [r for r in rows if is_draft_mtp(r) and r.speculative.n_max == n and r.outlier is None
            and acceptance_rate(r) is not None]
    if not cand:
        return None, []

    def rank(r):
        return (not (r.gpu_id and public_speed.same_card(r.gpu_id, gpu_id)), r.depth_tokens is not None,
                r.split_mode != split)

    best = min(rank(r) for r in cand)
    chosen = [r for r in cand if rank(r) == best]
    return sum(acceptance_rate(r) for r in chosen) / len(chosen), [r.id for r in chosen]


def predict(plain_tok_s: float, n: int, rate: float, data: dict | None = None) -> dict:
    """One stream's MTP speed at n-max n from the card's plain speed and an acceptance rate: {n_max, rate,
    tokens_per_step, step_over_plain, step_ms, step_from, tok_s, break_even_rate}."""
    ratio, how = step_over_plain(n, data)
    step_ms = ratio * 1000.0 / plain_tok_s
    tokens = speculative_speed.tokens_from_rate(rate, n)
    return {"n_max": n, "rate": rate, "tokens_per_step": tokens, "step_over_plain": ratio, "step_ms": step_ms,
            "step_from": how, "tok_s": speculative_speed.speed_tok_s(tokens, step_ms),
            "break_even_rate": speculative_speed.break_even(step_ms, 1000.0 / plain_tok_s, n)["rate"]}


def sweep(plain_tok_s: float, gpu_id: str, split: str, rows: list | None = None) -> list[dict]:
    """predict() at each measured n-max with the card's acceptance (acceptance_for), its row ids under "rows"."""
    rows = public_speed.load() if rows is None else rows
    data = step_data()
    out = []
    for n in N_VALUES:
        rate, ids = acceptance_for(gpu_id, n, split, rows)
        if rate is not None:
            out.append({**predict(plain_tok_s, n, rate, data), "rows": ids})
    return out


def published_best_n(gpu_id: str, split: str, rows: list | None = None) -> dict | None:
    """The fastest n-max of a same-card, same-split, short-prompt public draft-mtp sweep (rows at two or more n-max
    values, no outlier note): {n_max, tok_s, id}; None without such a sweep. A measured sweep on the card beats the
    model's pick (the carry-over assumption is only a hypothesis)."""
    rows = public_speed.load() if rows is None else rows
    same = [r for r in rows if is_draft_mtp(r) and r.speculative.n_max in N_VALUES and r.outlier is None
            and r.gpu_id and public_speed.same_card(r.gpu_id, gpu_id) and r.split_mode == split
            and r.depth_tokens is None]
    if len({r.speculative.n_max for r in same}) < 2:
        return None
    best = max(same, key=lambda r: r.decode_tok_s)
    return {"n_max": best.speculative.n_max, "tok_s": best.decode_tok_s, "id": best.id}


def flags(n: int) -> str:
    """llama-server's flags for MTP at n-max n."""
    return f"--spec-type draft-mtp --spec-draft-n-max {n}"


SOURCE = ("lab/data/calibration.yaml mtp_step_costs (outputs/h200-x1/20261201T225010Z_ca156936/records/"
          "06_speculative.json) x the card's predicted plain speed; acceptance from lab/data/public_speed.yaml")

__all__ = ["step_data", "step_over_plain", "acceptance_rate", "is_draft_mtp", "acceptance_for", "predict", "sweep",
           "published_best_n", "flags", "N_VALUES", "SOURCE"]
