"""Speculative decoding's speed from its step cost and its acceptance (pure: numbers in, numbers out).

One speculative step drafts n tokens (MTP: n passes of the model's MTP head) and verifies them together with the
target's own next token in one batch of n + 1; it yields 1 token plus the accepted drafts. So

    speed(n, a) = expected tokens per step ÷ step cost(n)

Expected tokens per step, two ways:
* per-draft acceptance `a`, each draft accepted with probability a given that every earlier one was (the
  geometric model of Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1):
  1 + a + a² + … + aⁿ = (1 − aⁿ⁺¹) ÷ (1 − a). An assumption: real drafts get worse further out, so a fitted `a`
  is an average.
* a measured or published acceptance RATE r = accepted ÷ drafted (what llama-server's timings.draft_n_accepted ÷
  draft_n and its log's "draft acceptance rate" report): 1 + r × drafts per step — no independence assumed; n drafts
  per step when the draft is never cut short (--spec-draft-p-min 0). A published mean acceptance length (tokens
  per step, the target's own token included) is used as it is.

Step cost(n): measured where a draft-mtp row at --spec-draft-n-max n exists (on random weights acceptance is ≈ 0,
so each step yields one token and ms per step = 1000 ÷ decode tok/s — the pure cost of drafting and verifying);
elsewhere verify(n + 1) + n × head, with verify(k) = the time llama-bench takes for a batch of k tokens
(pp<k>: k ÷ tok/s, interpolated between measured k) and `head` the MTP head's cost per draft fitted from the
measured rows (measured served and verified in-process, whatever the server adds per step lands in `head`).
Break-even: the acceptance at which speed(n, a) equals plain decoding, i.e. expected tokens per
step = step cost ÷ plain ms per token.
"""
from __future__ import annotations


def expected_tokens(a: float, n: int) -> float:
    """1 + a + … + aⁿ: tokens per step with n drafts, each accepted with probability a if all earlier were."""
    if not 0 <= a <= 1 or n < 0:
        raise ValueError(f"acceptance must be in [0, 1] and drafts ≥ 0, found a={a}, n={n}")
    return sum(a ** i for i in range(n + 1))


def tokens_from_rate(rate: float, drafts_per_step: float) -> float:
    """Tokens per step from an acceptance rate (accepted ÷ drafted) and the drafts made per step: 1 + rate × drafts."""
    if not 0 <= rate <= 1 or drafts_per_step < 0:
        raise ValueError(f"rate must be in [0, 1] and drafts ≥ 0, found rate={rate}, drafts={drafts_per_step}")
    return 1 + rate * drafts_per_step


def acceptance_for(tokens_per_step: float, n: int) -> float | None:
    """The per-draft acceptance a with expected_tokens(a, n) = tokens_per_step (bisection); 0 when one token per
    step is enough, None when even a = 1 (n + 1 tokens) falls short."""
    if tokens_per_step <= 1:
        return 0.0
    if tokens_per_step > n + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, n) < tokens_per_step else (lo, mid)
    return hi


def verify_ms(k: int, batch_tok_s: dict[int, float]) -> float:
    """Milliseconds for one batch of k tokens from llama-bench's pp<k> speeds ({k: tok/s}): measured k directly,
    else linear between the nearest measured sizes (beyond them: the nearest two, extended)."""
    times = {int(b): 1000.0 * int(b) / v for b, v in batch_tok_s.items() if v}
    if not times:
        raise ValueError("no batch speeds (llama-bench pp1, pp2, ...) to take verification times from")
    if k in times:
        return times[k]
    ks = sorted(times)
    if len(ks) == 1:
        return times[ks[0]] * k / ks[0]
    lo = max([b for b in ks if b < k], default=ks[0])
    hi = min([b for b in ks if b > k], default=ks[-1])
    if lo == hi:  # outside the measured range: extend the nearest segment
        lo, hi = (ks[0], ks[1]) if k < ks[0] else (ks[-2], ks[-1])
    return times[lo] + (times[hi] - times[lo]) * (k - lo) / (hi - lo)


def head_ms(step_ms: dict[int, float], batch_tok_s: dict[int, float]) -> float | None:
    """The MTP head's cost per draft: mean over the measured rows of (step − verify(n + 1)) ÷ n."""
    per = [(ms - verify_ms(n + 1, batch_tok_s)) / n for n, ms in step_ms.items() if n > 0 and ms]
    return sum(per) / len(per) if per else None


def step_cost_ms(n: int, step_ms: dict[int, float], batch_tok_s: dict[int, float] | None = None) -> tuple[float, str]:
    """(ms per step with n drafts, "measured" | "modelled"): the measured row when there is one, else
    verify(n + 1) + n × head."""
    if step_ms.get(n):
        return step_ms[n], "measured"
    if not batch_tok_s:
        raise ValueError(f"no measured step at n = {n} and no batch speeds to model it from")
    h = head_ms(step_ms, batch_tok_s)
    if h is None:
        raise ValueError("no measured draft-mtp step to fit the head's cost from")
    return verify_ms(n + 1, batch_tok_s) + n * h, "modelled"


def speed_tok_s(tokens_per_step: float, step_ms: float) -> float:
    """Decode tok/s for one stream: tokens per step ÷ step time."""
    return 1000.0 * tokens_per_step / step_ms


def break_even(step_ms: float, plain_ms: float, n: int) -> dict:
    """The acceptance at which speculation with n drafts equals plain decoding: tokens per step needed
    (step ÷ plain), as a per-draft acceptance (geometric) and as an acceptance rate (n drafts per step)."""
    need = step_ms / plain_ms
    return {"tokens_per_step": need, "acceptance": acceptance_for(need, n),
            "rate": max(0.0, (need - 1) / n) if need <= n + 1 else None}


def table(plain_tok_s: float, step_ms: dict[int, float], batch_tok_s: dict[int, float] | None = None,
          n_values=(1, 2, 3, 4), acceptances=(0.5, 0.7, 0.9)) -> list[dict]:
    """Per n: step cost (measured or modelled), ÷ plain, break-even acceptance (per draft and as a rate), and the
    speed at each acceptance (geometric) — the rows notebook 06's record carries."""
    plain_ms = 1000.0 / plain_tok_s
    rows = []
    for n in n_values:
        ms, how = step_cost_ms(n, step_ms, batch_tok_s)
        be = break_even(ms, plain_ms, n)
        row = {"n_max": n, "step_ms": ms, "step_from": how, "step_over_plain": ms / plain_ms,
               "break_even_acceptance": be["acceptance"], "break_even_rate": be["rate"]}
        row.update({f"tok_s_at_a{a:g}": speed_tok_s(expected_tokens(a, n), ms) for a in acceptances})
        rows.append(row)
    return rows


SOURCE = ("Leviathan et al. 2023, Fast Inference from Transformers via Speculative Decoding (arXiv:2211.17192), "
          "eq. 1; llama.cpp tools/server timings draft_n / draft_n_accepted")

__all__ = ["expected_tokens", "tokens_from_rate", "acceptance_for", "verify_ms", "head_ms", "step_cost_ms",
           "speed_tok_s", "break_even", "table", "SOURCE"]
