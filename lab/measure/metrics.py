"""The arithmetic of a load run (pure: records in, numbers out; no server, no clock, no file but the lab's data).

`summarise(results, duration_s, slo, criteria)`: latencies in ms and throughputs per second, `None` where
nothing succeeded (never 0), and a validity verdict with reasons (MLPerf-loadgen style); `queueing` tells a
server that queues from one that batches; `served_ratio` and `reachable_ratio` put the served speed beside
llama-bench's in-process speed.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py `calculate_metrics`): TTFT = send → first
streamed chunk carrying generated text; ITL = gaps between consecutive such chunks; TPOT = (E2EL − TTFT) /
(output tokens − 1) per request; E2EL = send → end of stream; goodput = requests/s that met every SLO. The
records are lab.measure.loadgen's `RequestResult` and `RunResult`.
"""
from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass

from lab.core import display, facts
from lab.core.run_summary import RunSummary
from lab.measure.loadgen import MIN_VALID_REQUESTS, RequestResult, RunResult

# Interactive use: the first token within 2 s, then at least 10 tokens/s per stream (faster than reading).
DEFAULT_SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0}
SERVED_RATIO_TARGET = 0.95


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0–100) with linear interpolation (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats_ms(values_s: list[float]) -> dict:
    """mean, p50, p90, p99 in milliseconds, and n; every value None when there is none."""
    if not values_s:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    ms = [v * 1000 for v in values_s]
    return {"mean": sum(ms) / len(ms), "p50": percentile(ms, 50), "p90": percentile(ms, 90),
            "p99": percentile(ms, 99), "n": len(ms)}


@dataclass(frozen=True)
class Criteria:
    """When a run counts: long enough, enough successes, few enough errors."""

    min_duration_s: float = 5.0
    min_successes: int = MIN_VALID_REQUESTS  # the sweep sends at least this many (lab.measure.loadgen)
    max_error_rate: float = 0.05
    max_cached_fraction: float = 0.2  # above this the prompt cache, not the model, made TTFT (a warning)


def tpot_s(r: RequestResult) -> float | None:
    """(E2EL − TTFT) / (output tokens − 1): the mean time per generated token after the first."""
    if not r.success or r.ttft_s is None or r.e2el_s is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.e2el_s - r.ttft_s) / (r.output_tokens - 1)


def meets_slo(r: RequestResult, slo: dict) -> bool:
    """Whether a successful request met every SLO given (ttft_ms, tpot_ms, e2el_ms)."""
    if not r.success:
        return False
    measured = {"ttft_ms": r.ttft_s, "tpot_ms": tpot_s(r), "e2el_ms": r.e2el_s}
    for key, limit in slo.items():
        if key not in measured:
            raise ValueError(f"unknown SLO {key!r}; known: {', '.join(measured)}")
        value = measured[key]
        if value is None or value * 1000 > limit:
            return False
    return True


def validity(summary: dict, criteria: Criteria = Criteria()) -> dict:
    """{"valid": bool, "reasons": [why not, with what to do], "warnings": [...]} for a summary."""
    reasons, warnings = [], []
    if summary["successes"] == 0:
        reasons.append("no request succeeded: read the errors and the server log")
    elif summary["successes"] < criteria.min_successes:
        reasons.append(f"{summary['successes']} successful requests < {criteria.min_successes}: send more requests")
    if summary["duration_s"] < criteria.min_duration_s:
        reasons.append(f"ran {summary['duration_s']:.2f} s < {criteria.min_duration_s:g} s: raise the request or time budget")
    if summary["error_rate"] is not None and summary["error_rate"] > criteria.max_error_rate:
        reasons.append(f"error rate {summary['error_rate']:.0%} > {criteria.max_error_rate:.0%}: "
                       f"{', '.join(summary['errors']) or 'see errors'}")
    cached = summary.get("cached_fraction")
    if cached is not None and cached > criteria.max_cached_fraction:
        warnings.append(f"{cached:.0%} of prompt tokens came from the server's prompt cache: TTFT is too low; "
                        "vary the prompts")
    if summary.get("requests_without_usage"):
        warnings.append(f"{summary['requests_without_usage']} successful request(s) had no usage: their output tokens "
                        "were counted as streamed chunks with text, one token per chunk assumed, and their prompt tokens "
                        "are unknown (the server ignores stream_options.include_usage)")
    return {"valid": not reasons, "reasons": reasons, "warnings": warnings}


def summarise(results: list[RequestResult], duration_s: float, slo: dict | None = None,
              criteria: Criteria = Criteria()) -> dict:
    """The metrics of one run (pure). Latencies in ms; throughputs per second of the run's duration.
    Every metric is None when no request succeeded — never 0, which would read as "measured: zero"."""
    ok = [r for r in results if r.success]
    failed = [r for r in results if not r.success]
    with_usage = [r for r in ok if r.output_tokens is not None]
    by_chunks = [r for r in ok if r.tokens_from == "chunks"]
    n = len(results)
    out_tokens = sum(r.output_tokens for r in with_usage) if with_usage else None
    prompt_known = [r for r in ok if r.prompt_tokens is not None]
    prompt_tokens = sum(r.prompt_tokens for r in prompt_known) if prompt_known else None
    cached_known = [r for r in prompt_known if r.cached_tokens is not None]
    decode = [(r.output_tokens - 1, r.e2el_s - r.ttft_s) for r in with_usage if tpot_s(r) is not None]
    decode_time = sum(t for _, t in decode)
    server_speeds = [r.server_timings["predicted_per_second"] for r in ok
                     if r.server_timings and r.server_timings.get("predicted_per_second")]
    server_prefill = [r.server_timings["prompt_per_second"] for r in ok
                      if r.server_timings and r.server_timings.get("prompt_per_second")]
    # prefill as the client saw it: prompt tokens over the time to the first token (queueing included)
    prefill = [(r.prompt_tokens, r.ttft_s) for r in ok if r.prompt_tokens and r.ttft_s]
    timed = [r for r in ok if r.ttft_s is not None and r.e2el_s]
    per_s = (lambda x: x / duration_s if x is not None and ok and duration_s > 0 else None)
    summary = {
        "requests": n, "successes": len(ok), "failures": len(failed), "duration_s": duration_s,
        "error_rate": len(failed) / n if n else None,
        "errors": dict(Counter(display.clip(r.error or "unknown", 120) for r in failed)),
        "ttft_ms": stats_ms([r.ttft_s for r in ok]),
        "tpot_ms": stats_ms([t for r in ok if (t := tpot_s(r)) is not None]),
        "itl_ms": stats_ms([g for r in ok for g in r.itl_s]),
        "e2el_ms": stats_ms([r.e2el_s for r in ok]),
        "request_throughput": per_s(len(ok)) if ok else None,
        "output_throughput": per_s(out_tokens),
        "total_token_throughput": per_s(out_tokens + prompt_tokens) if out_tokens is not None and prompt_tokens is not None else None,
        "stream_decode_tok_s": sum(k for k, _ in decode) / decode_time if decode and decode_time > 0 else None,
        "server_decode_tok_s": sum(server_speeds) / len(server_speeds) if server_speeds else None,
        "prefill_tok_s": sum(p for p, _ in prefill) / sum(t for _, t in prefill) if prefill else None,
        "server_prefill_tok_s": sum(server_prefill) / len(server_prefill) if server_prefill else None,
        "prefill_share": (sum(r.ttft_s for r in timed) / sum(r.e2el_s for r in timed)) if timed else None,
        "output_tokens_mean": out_tokens / len(with_usage) if with_usage else None,
        "prompt_tokens_mean": prompt_tokens / len(prompt_known) if prompt_known else None,
        "cached_fraction": (sum(r.cached_tokens for r in cached_known) / max(1, sum(r.prompt_tokens for r in cached_known))
                            if cached_known else None),
        "requests_without_usage": len(ok) - len(with_usage) + len(by_chunks),
        "tokens_counted_from": ("chunks" if len(by_chunks) == len(ok) else "usage" if not by_chunks else "usage and chunks")
        if ok else None,
        "goodput": None,
    }
    if slo:
        good = sum(meets_slo(r, slo) for r in results)
        summary["goodput"] = {"slo": dict(slo), "good_requests": good,
                              "goodput_req_s": good / duration_s if ok and duration_s > 0 else None,
                              "fraction": good / n if ok else None}
    summary["validity"] = validity(summary, criteria)
    return summary


def summarise_run(run: RunResult, slo: dict | None = None, criteria: Criteria = Criteria()) -> RunSummary:
    """`summarise` of a RunResult, with its load settings and the client's CPU time, as the typed RunSummary
    (lab.core.run_summary: the names of lab/data/fields.yaml). A level measured as
    repetitions (lab.measure.load_levels.sweep) is summarised as a whole — the validity rule applies to the level, its
    fields are over every repetition's requests and their summed duration — plus each repetition's own figures
    (`repetitions`), their mean, sd and range (`spread`), and the warm-up's account (`warmup`)."""
    s = summarise(run.results, run.duration_s, slo, criteria)
    s.update(concurrency=run.spec.concurrency, request_rate=run.spec.request_rate, client_cpu_s=run.client_cpu_s)
    s["decode_tok_s_summed"] = decode_summed(s["stream_decode_tok_s"], run.spec.concurrency)
    n = run.spec.concurrency
    groups = ([[r for r in run.results if r.repetition == rep["repetition"]] for rep in run.repetitions]
              if run.repetitions else [run.results])
    windows = [concurrency_window(g, n, a, b) for g, (a, b) in zip(groups, rep_windows(run))] if n else []
    s.update(steady_figures(windows) if windows else dict.fromkeys(STEADY_KEYS))
    res = run.resources or {}
    # None = not measured (no NVML / no sampler), never 0
    s.update(joules_per_token=res.get("joules_per_token"), mean_power_w=res.get("mean_power_w"),
             mean_power_w_per_gpu=res.get("mean_power_w_per_gpu"), peak_vram_mib=res.get("peak_vram_mib"),
             peak_vram_mib_per_gpu=res.get("peak_vram_mib_per_gpu"), peak_host_rss_mib=res.get("peak_host_rss_mib"),
             energy_not_measured=res.get("gpu_not_measured") if res else "no sampler ran")
    reps = [repetition_figures(g, rep["duration_s"], n, w) | {"repetition": rep["repetition"]}
            for g, rep, w in zip(groups, run.repetitions or [], windows or [None] * len(groups))]
    s.update(repetitions=reps, spread=spread(reps), warmup=run.warmup_rounds, deadline_s=run.deadline_s, cut=run.cut)
    reasons, warnings = steady_state_validity(s, reps)
    s["validity"]["reasons"] += reasons
    s["validity"]["warnings"] += warnings
    s["validity"]["valid"] = not s["validity"]["reasons"]
    if run.cut:  # its failures are counted above; here is why they failed
        s["validity"]["warnings"].append(f"the level ended at its deadline: {run.cut}")
    odd = sum(bool(r.findings) for r in run.results)
    if odd:
        s["validity"]["warnings"].append(f"{odd} request(s) streamed fields of an unexpected type, not used: "
                                         f"{next(r.findings[0] for r in run.results if r.findings)}")
    return RunSummary.model_validate(s)  # the schema's names only (lab/data/fields.yaml)


# ================================================================ the level's concurrency over time
# A closed loop at N streams sends N requests at once, so a level opens with their prefills (llama-server processes
# prompts inside its decode loop: a batch of 2048 tokens holds four 512-token prompts, and the streams already
# decoding wait for it) and closes with requests ending at different times. Only while all N decode at once is the
# level in the state llama-batched-bench's S_TG measures; on the H100 (2026-12-07, 256-token outputs) that was 69 %
# of the window at 16 streams and 78-89 % at 4 and 8 (outputs/h100-x1/README.md, "the served gap, attributed").
STEADY_MIN_FRACTION = 0.5  # below this share of the window at full concurrency, the level's decode figures are mostly ramp
STEADY_SPREAD = 0.15  # repetitions whose steady decode differ by more than this (max ÷ min − 1) are not one steady state
STEADY_AGREE = 0.05  # a level mostly outside its steady state whose decode summed is within this of it: nothing misleads


def decoded_by(r: RequestResult, t: float) -> float:
    """Tokens after its first that request `r` had streamed by time `t` (the run's clock, as `start_s`): its output
    tokens spread evenly over its chunks carrying text, interpolated between chunk arrivals (a chunk may carry more
    than one token, and a random-weights model's partial UTF-8 tokens carry no text)."""
    times = [r.start_s + c for c in r.chunk_times_s]
    if not times or not r.output_tokens or t <= times[0]:
        return 0.0
    if t >= times[-1]:
        return float(r.output_tokens - 1)
    per_chunk = (r.output_tokens - 1) / (len(times) - 1)
    k = bisect.bisect_right(times, t) - 1
    gap = times[k + 1] - times[k]
    return per_chunk * (k + ((t - times[k]) / gap if gap > 0 else 0.0))


def concurrency_window(results: list[RequestResult], streams: int, start_s: float, end_s: float) -> dict:
    """How the window [start_s, end_s] of a closed loop at `streams` was spent (pure): seconds with all `streams`
    decoding at once (a request decodes from its first token to its end), seconds with at least one request waiting
    for its first token (its prompt queued or being processed) and not all decoding, the decode tokens (after each
    request's first) streamed in the whole window and in its full-concurrency part."""
    ok = [r for r in results if r.success and r.ttft_s is not None and r.e2el_s is not None]
    edges = sorted({start_s, end_s} | {min(max(t, start_s), end_s) for r in ok
                                       for t in (r.start_s, r.start_s + r.ttft_s, r.start_s + r.e2el_s)})
    full_s = waiting_s = full_tokens = 0.0
    for a, b in zip(edges, edges[1:]):
        mid = (a + b) / 2
        decoding = [r for r in ok if r.start_s + r.ttft_s <= mid < r.start_s + r.e2el_s]
        if len(decoding) >= streams:
            full_s += b - a
            full_tokens += sum(decoded_by(r, b) - decoded_by(r, a) for r in decoding)
        elif any(r.start_s <= mid < r.start_s + r.ttft_s for r in ok):
            waiting_s += b - a
    tokens = sum(decoded_by(r, end_s) - decoded_by(r, start_s) for r in ok)
    return {"window_s": end_s - start_s, "full_s": full_s, "waiting_s": waiting_s, "decode_tokens": tokens,
            "full_decode_tokens": full_tokens}


def steady_figures(windows: list[dict]) -> dict:
    """A level's steady-state figures from its repetitions' `concurrency_window`s: decode tok/s summed over the
    streams while all of them decoded (None: never), that share of the window, the share with prompts waiting or
    being processed, and the decode tok/s over the whole window (tokens after each request's first ÷ wall time)."""
    window = sum(w["window_s"] for w in windows)
    full = sum(w["full_s"] for w in windows)
    return {"steady_decode_tok_s": sum(w["full_decode_tokens"] for w in windows) / full if full > 0 else None,
            "full_concurrency_fraction": full / window if window > 0 else None,
            "prefill_fraction": sum(w["waiting_s"] for w in windows) / window if window > 0 else None,
            "window_decode_tok_s": sum(w["decode_tokens"] for w in windows) / window if window > 0 else None}


def rep_windows(run: RunResult) -> list[tuple[float, float]]:
    """Each repetition's measured window on the run's clock (`start_s`): the whole run when it had none."""
    if not run.repetitions:
        return [(0.0, run.duration_s)]
    t0 = run.repetitions[0]["t0_perf"]
    return [(rep["t0_perf"] - t0, rep["t0_perf"] - t0 + rep["duration_s"]) for rep in run.repetitions]


def steady_state_validity(s: dict, reps: list[dict]) -> tuple[list[str], list[str]]:
    """(reasons, warnings) about the level's steady state: a closed loop that never had all its streams decoding
    at once measured no steady state (a warning: its decode figures are ramp and tail, its output throughput and
    latencies are still what it measured; the 2-core CPU default at 4 streams is such a level); one mostly outside it whose
    decode summed differs from its steady decode, or whose repetitions decoded at different steady speeds, says so
    (warnings). One stream's decode is its own steady state: only the repetitions' spread applies there."""
    n, frac = s.get("concurrency"), s.get("full_concurrency_fraction")
    if not n or frac is None or not s["successes"]:
        return [], []
    if s["steady_decode_tok_s"] is None:  # a warning: what was measured (output throughput, TTFT) still stands
        return [], [f"never had all {n} streams decoding at once: no steady state to report (the requests' prefills "
                    "and ends never overlapped all their decodes); decode_tok_s_summed is not a steady figure here; send "
                    "more requests per repetition or longer outputs"]
    warnings = []
    summed = s.get("decode_tok_s_summed")
    if n > 1 and frac < STEADY_MIN_FRACTION and summed and abs(summed / s["steady_decode_tok_s"] - 1) > STEADY_AGREE:
        warnings.append(f"only {frac:.0%} of the window had all {n} streams decoding (prefills {s['prefill_fraction']:.0%}): "
                        f"decode_tok_s_summed ({summed:.1f} tok/s) mixes ramp and tail; steady_decode_tok_s "
                        f"({s['steady_decode_tok_s']:.1f}) is the figure to compare with llama-batched-bench")
    steady = [r["steady_decode_tok_s"] for r in reps if r.get("steady_decode_tok_s")]
    if len(steady) > 1 and max(steady) / min(steady) - 1 > STEADY_SPREAD:
        warnings.append(f"the repetitions' steady decode differ by {max(steady) / min(steady) - 1:.0%} "
                        f"({min(steady):.1f}-{max(steady):.1f} tok/s): not one steady state; on llama-server with a "
                        "hybrid model, which slots the requests landed in (llama.cpp issue #25840; "
                        "lab.measure.slot_placement) moved it on the H100 and the H200")
    return [], warnings


def decode_summed(stream_decode_tok_s: float | None, concurrency: int | None) -> float | None:
    """Decode-only tokens per second summed over the level's streams: one stream's decode speed × the streams in
    flight. The prefills of new arrivals slow the others' decode and are inside the per-stream speed, so this mixes
    the level's ramp with its steady state; `steady_figures`' steady_decode_tok_s counts only the time all streams
    decoded, the state llama-batched-bench's S_TG measures in-process. Unlike output throughput (tokens ÷ wall time,
    prefill and gaps included), both leave each request's own wait for its first token out."""
    if stream_decode_tok_s is None or not concurrency:
        return None
    return stream_decode_tok_s * concurrency


STEADY_KEYS = ("steady_decode_tok_s", "full_concurrency_fraction", "prefill_fraction", "window_decode_tok_s")
SPREAD_KEYS = ("output_throughput", "stream_decode_tok_s", "decode_tok_s_summed", "server_decode_tok_s",
               "request_throughput", "ttft_p50_ms", "tpot_p50_ms", "prefill_tok_s", *STEADY_KEYS)


def repetition_figures(results: list[RequestResult], duration_s: float, concurrency: int | None,
                       window: dict | None = None) -> dict:
    """One repetition's own figures (the SPREAD_KEYS, its requests and duration) with its `concurrency_window`'s
    steady-state figures (None without one); validity is the level's."""
    s = summarise(results, duration_s)
    steady = steady_figures([window]) if window else dict.fromkeys(STEADY_KEYS)
    return steady | {"requests": s["requests"], "successes": s["successes"], "duration_s": duration_s,
            "output_throughput": s["output_throughput"], "stream_decode_tok_s": s["stream_decode_tok_s"],
            "decode_tok_s_summed": decode_summed(s["stream_decode_tok_s"], concurrency),
            "server_decode_tok_s": s["server_decode_tok_s"], "request_throughput": s["request_throughput"],
            "ttft_p50_ms": s["ttft_ms"]["p50"], "tpot_p50_ms": s["tpot_ms"]["p50"], "prefill_tok_s": s["prefill_tok_s"]}


def spread(rows: list[dict], keys=SPREAD_KEYS) -> dict:
    """Per key: mean, sample sd (None below two values), min, max, the values and n, over the rows where it is
    known (pure). {} for no rows."""
    import statistics

    out = {}
    for key in keys if rows else ():
        xs = [r[key] for r in rows if r.get(key) is not None]
        out[key] = {"mean": statistics.fmean(xs) if xs else None, "sd": statistics.stdev(xs) if len(xs) > 1 else None,
                    "min": min(xs, default=None), "max": max(xs, default=None), "n": len(xs), "values": xs}
    return out


# A server that runs one request at a time makes each new request wait for those ahead of it: at
# concurrency c (closed loop) the median TTFT grows by about (c − 1) × one request's end-to-end time,
# and the total throughput stays where one stream had it. Ollama does this when OLLAMA_NUM_PARALLEL is 1
# (https://docs.ollama.com/faq "How does Ollama handle concurrent requests?"), llama-server with -np 1.
QUEUED_WAIT_FRACTION = 0.5  # extra TTFT ≥ half the serial wait ...
QUEUED_MAX_GAIN = 1.25  # ... and throughput < 1.25 × one stream's: the server queues


def queueing(summaries: list[dict]) -> list[dict]:
    """Per concurrency level, whether the server queued requests instead of batching them (pure).

    extra_wait_ms = TTFT p50 at this level − at concurrency 1; serial_wait_ms = (c − 1) × E2EL p50 at
    concurrency 1 (what a one-at-a-time server adds); throughput_gain = output tok/s ÷ concurrency 1's."""
    base = next((s for s in summaries if s.get("concurrency") == 1 and s["successes"]), None)
    rows = []
    for s in summaries:
        c = s.get("concurrency")
        row = {"concurrency": c, "ttft_p50_ms": s["ttft_ms"]["p50"], "extra_wait_ms": None, "serial_wait_ms": None,
               "wait_vs_serial": None, "throughput_gain": None, "queued": None}
        if base and c and c > 1 and s["ttft_ms"]["p50"] is not None and base["e2el_ms"]["p50"]:
            row["extra_wait_ms"] = s["ttft_ms"]["p50"] - base["ttft_ms"]["p50"]
            row["serial_wait_ms"] = (c - 1) * base["e2el_ms"]["p50"]
            row["wait_vs_serial"] = row["extra_wait_ms"] / row["serial_wait_ms"]
            if s["output_throughput"] and base["output_throughput"]:
                row["throughput_gain"] = s["output_throughput"] / base["output_throughput"]
            row["queued"] = (row["wait_vs_serial"] >= QUEUED_WAIT_FRACTION and row["throughput_gain"] is not None
                             and row["throughput_gain"] < QUEUED_MAX_GAIN)
        rows.append(row)
    return rows


def criteria_for(profile) -> Criteria:
    """Validity criteria that the profile's own benchmark plan can meet (small plans, small minimums)."""
    return Criteria(min_duration_s=3.0, min_successes=min(4, profile.bench_requests), max_error_rate=0.05)


# ================================================================ served against in-process
def served_cost_s() -> tuple[float, str]:
    """llama-server's fixed per-token cost (seconds) — the largest measured in lab/data/served_overhead.yaml —
    and where it was measured."""
    rows = facts.load("served_overhead", "measurements")["measurements"]
    worst = max(rows, key=lambda r: 1 / r["served_tok_s"] - 1 / r["in_process_tok_s"])
    return 1 / worst["served_tok_s"] - 1 / worst["in_process_tok_s"], worst["source"].strip()


def reachable_ratio(in_process_tok_s: float | None) -> float | None:
    """The best served ÷ in-process a server with that fixed per-token cost can reach at this speed."""
    if not in_process_tok_s:
        return None
    return 1 / (1 + served_cost_s()[0] * in_process_tok_s)


def max_tok_s_for_target() -> float:
    """The fastest in-process decode at which served ÷ in-process can still reach the target:
    1 / (1 + c × tg) ≥ T  ⇔  tg ≤ (1/T − 1) / c."""
    return (1 / SERVED_RATIO_TARGET - 1) / served_cost_s()[0]


def ratio(a: float | None, b: float | None, digits: int | None = None) -> float | None:
    """a ÷ b, None when either is missing or b is 0 (a missing number is never shown as 0); `digits` rounds."""
    if a is None or not b:
        return None
    return a / b if digits is None else round(a / b, digits)


def served_ratio(served_tok_s: float | None, in_process_tok_s: float | None) -> float | None:
    """Served single-stream decode speed ÷ llama-bench tg for the same model and threads (target ≥ 0.95)."""
    return ratio(served_tok_s, in_process_tok_s)


__all__ = ["DEFAULT_SLO", "SERVED_RATIO_TARGET", "Criteria", "percentile", "stats_ms", "tpot_s", "meets_slo",
           "validity", "summarise", "summarise_run", "decode_summed", "repetition_figures", "spread", "SPREAD_KEYS",
           "STEADY_KEYS", "STEADY_MIN_FRACTION", "STEADY_SPREAD", "STEADY_AGREE", "decoded_by", "concurrency_window",
           "steady_figures", "rep_windows", "steady_state_validity",
           "queueing", "criteria_for", "ratio", "served_ratio", "served_cost_s", "reachable_ratio", "max_tok_s_for_target"]
