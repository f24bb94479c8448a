"""lab.measure.metrics' steady state of a level (issue 43): decode summed only while all N streams decode, the share
of the window at N, and the verdicts — on hand-made requests, and replayed on the committed H100 run's raw samples
(outputs/h100-x1/20261207T163707Z_add993cf, notebook 06 with -bs, 256 tokens out, 3 repetitions per level)."""
import json
from pathlib import Path

import pytest

from lab.measure import loadgen, metrics, yardstick
from lab.measure.loadgen import RequestResult

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "outputs/h100-x1/20261207T163707Z_add993cf/records/06_benchmark.json"


def ok(index, start, ttft, chunks, e2el, out):
    return RequestResult(index, True, None, start, ttft, list(chunks), e2el, out, 10, 0)


def level(results, duration, concurrency=2):
    spec = loadgen.LoadSpec(concurrency=concurrency, max_requests=len(results), warmup_requests=0)
    return loadgen.RunResult(spec, "t", results, duration, [], "2026-12-07T00:00:00Z", 0.1, 8, 0.0, duration)


def test_tokens_are_spread_over_the_chunks_with_text():
    r = ok(0, 1.0, 0.5, [0.5, 0.7, 0.9, 1.1], 1.2, 7)  # 6 tokens after the first, over 3 gaps: 2 a gap
    assert metrics.decoded_by(r, 1.4) == 0.0  # its first chunk arrives at 1.5
    assert metrics.decoded_by(r, 1.8) == pytest.approx(3.0)  # halfway between the 2nd and 3rd chunks
    assert metrics.decoded_by(r, 2.2) == 6.0


def test_the_window_splits_into_full_concurrency_waiting_and_the_rest():
    a = ok(0, 0.0, 0.5, [0.5, 0.7, 0.9, 1.1], 1.1, 4)  # decodes 0.5 → 1.1
    b = ok(1, 0.1, 0.5, [0.5, 0.7, 0.9, 1.1], 1.1, 4)  # waits 0.1 → 0.6, decodes 0.6 → 1.2
    w = metrics.concurrency_window([a, b], 2, 0.0, 1.5)
    assert w["window_s"] == 1.5 and w["full_s"] == pytest.approx(0.5) and w["waiting_s"] == pytest.approx(0.6)
    # in 0.6 → 1.1 a streamed 3 × (0.5/0.6) tokens, b 3 × (0.5/0.6): 2.5 each
    assert w["full_decode_tokens"] == pytest.approx(5.0) and w["decode_tokens"] == pytest.approx(6.0)
    s = metrics.steady_figures([w])
    assert s["steady_decode_tok_s"] == pytest.approx(10.0) and s["full_concurrency_fraction"] == pytest.approx(1 / 3)
    assert s["prefill_fraction"] == pytest.approx(0.4) and s["window_decode_tok_s"] == pytest.approx(4.0)


def test_a_level_that_never_had_all_streams_decoding_says_so():
    # 2 streams, but the requests never decode at once (the second sent after the first ended): a warning, not an
    # invalid level - its output throughput and latencies stand (make run's CPU default at 4 streams on 2 cores)
    run = level([ok(j, 1.1 * j, 0.5, [0.5, 0.7, 0.9, 1.1], 1.1, 4) for j in range(4)], 5.0)
    s = metrics.summarise_run(run)
    assert s["steady_decode_tok_s"] is None and s["full_concurrency_fraction"] == 0.0
    assert s["validity"]["valid"] and s["validity"]["reasons"] == []
    assert s["validity"]["warnings"] == [
        "never had all 2 streams decoding at once: no steady state to report (the requests' prefills and ends never "
        "overlapped all their decodes); decode_tok_s_summed is not a steady figure here; send more requests per "
        "repetition or longer outputs"]
    assert s["decode_tok_s_summed"] == pytest.approx(10.0)  # per-stream × 2: the number that would have misled


def test_a_level_mostly_outside_its_steady_state_says_its_summed_decode_misleads():
    """Stream A decodes alone at 20 tok/s while B's prompt waits 1.5 s, then both at 10 tok/s: per-stream decode × 2
    says 30.8 tok/s, but the two streams together only ever did 20."""
    a = ok(0, 0.0, 0.1, [0.1 + 0.05 * k for k in range(29)] + [1.6 + 0.1 * k for k in range(6)], 2.1, 35)
    b = ok(1, 0.0, 1.5, [1.5 + 0.1 * k for k in range(7)], 2.1, 7)
    s = metrics.summarise_run(level([a, b], 2.1), criteria=metrics.Criteria(min_duration_s=1.0, min_successes=2))
    assert s["decode_tok_s_summed"] == pytest.approx(2 * 40 / 2.6) and s["steady_decode_tok_s"] == pytest.approx(20.0)
    assert s["full_concurrency_fraction"] == pytest.approx(0.6 / 2.1) and s["prefill_fraction"] == pytest.approx(1.5 / 2.1)
    assert s["validity"]["valid"] and s["validity"]["warnings"] == [
        "only 29% of the window had all 2 streams decoding (prefills 71%): decode_tok_s_summed (30.8 tok/s) mixes ramp "
        "and tail; steady_decode_tok_s (20.0) is the figure to compare with llama-batched-bench"]
    one = metrics.summarise_run(level([a], 2.1, concurrency=1), criteria=metrics.Criteria(min_duration_s=1.0, min_successes=1))
    assert one["validity"]["warnings"] == []  # one stream's decode is its own steady state


# ---------------------------------------------------------------- the committed H100 run, replayed
def h100_levels() -> tuple[dict[int, dict], dict]:
    record = json.loads(H100.read_text())
    out = {}
    for run in record["runs"]:
        results = [RequestResult(**r) for r in run["results"]]
        rr = loadgen.RunResult(loadgen.LoadSpec(**run["spec"]), run["target"], results, run["duration_s"], [],
                               run["started_utc"], run["client_cpu_s"], run["prompt_words"],
                               repetitions=run["repetitions"], warmup_rounds=run["warmup_rounds"])
        out[run["spec"]["concurrency"]] = metrics.summarise_run(rr)
    return out, record["batched_bench"]


def r(x, digits=1):
    return round(x, digits)


def test_h100_sixteen_streams_are_steady_at_0_90_of_batched_bench_for_69_percent_of_the_time():
    levels, batched = h100_levels()
    s = levels[16]
    assert (r(s["steady_decode_tok_s"]), r(s["decode_tok_s_summed"]), r(s["window_decode_tok_s"])) == (453.6, 409.0, 320.1)
    assert (r(s["full_concurrency_fraction"], 3), r(s["prefill_fraction"], 3)) == (0.694, 0.283)
    assert [r(x["steady_decode_tok_s"]) for x in s["repetitions"]] == [454.4, 452.6, 453.7]
    assert s["validity"] == {"valid": True, "reasons": [], "warnings": []}
    row = yardstick.level_row(s, batched["by_parallel"]["16"])  # S_TG 502.6 tok/s
    assert (r(row["served_over_in_process"], 3), r(row["steady_over_in_process"], 3)) == (0.814, 0.903)
    assert "0.90 while all 16 decoded (69% of the level)" in row["limited_by"]
    assert "prompts being processed 28% of the time" in row["limited_by"]


@pytest.mark.parametrize("streams, steady, spread", [(4, [209.1, 118.0, 205.9], "77%"), (8, [271.4, 178.6, 272.6], "53%")])
def test_h100_four_and_eight_streams_are_two_speeds_and_say_so(streams, steady, spread):
    """One repetition of each level decoded at 0.54 / 0.64 of S_TG, the others at 0.94-0.97: its slots were split
    ({0, 1, 2, 15} and {0-6, 15}; the server log's 'graphs reused' did not move during it)."""
    levels, batched = h100_levels()
    s = levels[streams]
    assert [r(x["steady_decode_tok_s"]) for x in s["repetitions"]] == steady
    assert s["validity"]["valid"] and s["validity"]["warnings"][0].startswith(
        f"the repetitions' steady decode differ by {spread}")
    row = yardstick.level_row(s, batched["by_parallel"][str(streams)])
    assert "its repetitions' steady states ranged" in row["limited_by"]
    assert [r(x["full_concurrency_fraction"], 3) for x in s["repetitions"]] == (
        [0.819, 0.891, 0.824] if streams == 4 else [0.781, 0.853, 0.785])


def test_h100_one_stream_is_its_own_steady_state():
    levels, _ = h100_levels()
    s = levels[1]
    assert r(s["steady_decode_tok_s"], 2) == r(s["decode_tok_s_summed"], 2) == 85.43
    assert r(s["full_concurrency_fraction"], 3) == 0.919  # the rest: each request's own prefill
