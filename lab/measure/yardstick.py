"""Served speed against the in-process yardsticks, level by level (pure: numbers in, rows out).

Two yardsticks run the same model with the server's own settings, without HTTP, a scheduler or slots:
llama-bench's tg for one stream (lab.model.llama_bench) and llama-batched-bench's S_TG for N sequences decoding in
lockstep (lab.measure.llama_batched_bench). Each ratio row says what limits it:

* one stream: llama-server spends a fixed time per token outside the compute graph (sampling, detokenizing,
  streaming; lab/data/served_overhead.yaml), which caps served ÷ in-process at 1 ÷ (1 + cost × tg);
* N streams: the served decode summed over the streams (lab.measure.metrics.decode_summed) against S_TG. The
  difference is turned into extra milliseconds per decode step and set against N × the fixed per-token cost
  (llama-server does that work per stream, on its one loop thread): about that much is the server's per-token
  work; more is per-request work — prefills of arriving requests between decode steps (batched-bench prefills all
  N before it times the decode), slot bookkeeping, and on hybrid models the recurrent state copied into context
  checkpoints and the prompt cache (-ctxcp, --cache-ram: lab tune measures them).
Output throughput (tokens ÷ wall time, prefill included) is set beside batched-bench's B·TG ÷ (T_PP + T_TG). The
level's steady state (lab.measure.metrics.concurrency_window: decode summed only while all N streams decode, no prompt
being processed) is set against S_TG too: what is left there is the server's per-step work; the difference to the
whole level is its ramp (the N prefills, each stalling the streams already decoding) and tail.
"""
from __future__ import annotations

from lab.core import display
from lab.measure import metrics

NEAR = 0.9  # served ≥ 0.9 × in-process: the engine itself is the limit
PER_TOKEN_SLACK = 1.5  # extra time per step up to 1.5 × N × the fixed per-token cost counts as that cost
STEADY_GAIN = 0.03  # the steady state beats the whole level by at least this much of S_TG: the row says why


def single_row(single: dict | None, tg_tok_s: float | None, tg_test: str | None = None) -> dict:
    """Served single-stream decode ÷ llama-bench tg, and what limits it."""
    served = single.get("stream_decode_tok_s") if single else None
    ratio = metrics.served_ratio(served, tg_tok_s)
    cost, source = metrics.served_cost_s()
    reach = metrics.reachable_ratio(tg_tok_s)
    if ratio is None:
        limit = "not measured: needs a served single stream and llama-bench"
    else:
        limit = (f"llama-server's fixed ≈ {cost * 1e3:.2f} ms per token outside the graph caps it at {reach:.2f} at "
                 f"{tg_tok_s:.0f} tok/s in-process ({display.clip(source.splitlines()[0], 80)})")
        if ratio < reach - 0.05:
            limit += "; the rest is other work on the machine or inside the server (compare the server-reported speed)"
    return {"concurrency": 1, "yardstick": f"llama-bench {tg_test or 'tg'}", "served_tok_s": served,
            "in_process_tok_s": tg_tok_s, "served_over_in_process": ratio, "steady_tok_s": None,
            "steady_over_in_process": None, "full_concurrency_fraction": None, "served_output_tok_s": None,
            "in_process_output_tok_s": None, "output_ratio": None, "extra_ms_per_step": None, "limited_by": limit}


def level_row(summary: dict, batched: dict | None) -> dict:
    """One concurrency level: served decode summed ÷ batched-bench S_TG at the same N, the output rates beside
    each other, the extra time per decode step, and what limits it."""
    n = summary.get("concurrency")
    served = summary.get("decode_tok_s_summed")
    s_tg = batched.get("speed_tg") if batched else None
    ratio = metrics.ratio(served, s_tg)
    extra = 1e3 * n / served - 1e3 * n / s_tg if served and s_tg and n else None
    cost_ms = metrics.served_cost_s()[0] * 1e3
    if ratio is None:
        limit = "not measured: needs the served level and llama-batched-bench at the same N"
    elif ratio >= NEAR:
        limit = f"the engine's own batched decode at {n} sequences (served ≈ in-process)"
    elif extra <= PER_TOKEN_SLACK * n * cost_ms:
        limit = (f"llama-server's per-token work: {extra:.1f} ms more per step ≈ {n} streams × {cost_ms:.2f} ms "
                 "(sampling, detokenizing, streaming on its one loop thread)")
    else:
        limit = (f"per-request work: {extra:.1f} ms more per step, over {n} × {cost_ms:.2f} ms of per-token work — "
                 "prefills of arriving requests between decode steps, slot bookkeeping, the hybrid's state copies "
                 "(-ctxcp, --cache-ram)")
    steady = summary.get("steady_decode_tok_s")
    steady_ratio = metrics.ratio(steady, s_tg)
    if ratio is not None and steady_ratio is not None and steady_ratio - ratio >= STEADY_GAIN:
        limit += (f"; {steady_ratio:.2f} while all {n} decoded ({summary['full_concurrency_fraction']:.0%} of the level): "
                  f"the rest is its ramp — prompts being processed {summary['prefill_fraction']:.0%} of the time stall "
                  "the others' decode")
    reps = (summary.get("spread") or {}).get("steady_decode_tok_s") or {}
    if s_tg and reps.get("min") and reps["max"] / reps["min"] - 1 > metrics.STEADY_SPREAD:
        limit += (f"; its repetitions' steady states ranged {reps['min'] / s_tg:.2f}-{reps['max'] / s_tg:.2f}: not one "
                  "speed (llama-server on a hybrid model: which slots the requests landed in, llama.cpp issue #25840)")
    return {"concurrency": n, "yardstick": f"llama-batched-bench S_TG (B={n})" if batched else "llama-batched-bench",
            "served_tok_s": served, "in_process_tok_s": s_tg, "served_over_in_process": ratio,
            "steady_tok_s": steady, "steady_over_in_process": steady_ratio,
            "full_concurrency_fraction": summary.get("full_concurrency_fraction"),
            "served_output_tok_s": summary.get("output_throughput"),
            "in_process_output_tok_s": batched.get("output_tok_s") if batched else None,
            "output_ratio": metrics.ratio(summary.get("output_throughput"), batched.get("output_tok_s") if batched else None),
            "extra_ms_per_step": extra, "limited_by": limit}


def rows(summaries: list[dict], batched_result: dict | None, llama_bench_result: dict | None) -> list[dict]:
    """The single-stream row (llama-bench), then one row per served level (llama-batched-bench)."""
    tg = (llama_bench_result or {}).get("tg") or {}
    by_n = (batched_result or {}).get("by_parallel") or {}
    single = next((s for s in summaries if s.get("concurrency") == 1), None)
    return [single_row(single, tg.get("tok_s"), tg.get("test"))] + [
        level_row(s, by_n.get(s.get("concurrency")) or by_n.get(str(s.get("concurrency")))) for s in summaries]


__all__ = ["NEAR", "PER_TOKEN_SLACK", "STEADY_GAIN", "single_row", "level_row", "rows"]
