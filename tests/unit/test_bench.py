"""The load generator: metric arithmetic on hand-made traces (exact), stream parsing, load shapes
against a local source, and a real llama-server killed mid-sweep (integration)."""
import asyncio
import os
import random
import signal
import threading
import time

import httpx
import pytest

from lab.measure import bench_source, load_levels, loadgen, metrics
from lab.measure.loadgen import RequestResult
from lab.measure.metrics import Criteria


def ok(index, start, ttft, chunks, e2el, out, prompt=10, cached=0, timings=None):
    return RequestResult(index, True, None, start, ttft, list(chunks), e2el, out, prompt, cached, 0, timings)


def failed(index, error="ConnectError", chunks=()):
    return RequestResult(index, False, error, 0.0, None, list(chunks), 0.1)


TRACE = [
    ok(0, 0.0, 0.5, [0.5, 0.6, 0.8, 1.0], 1.1, 4, prompt=10, timings={"predicted_per_second": 10.0}),
    ok(1, 0.2, 0.3, [0.3, 0.5], 0.5, 2, prompt=20, cached=5, timings={"predicted_per_second": 20.0}),
    failed(2),
]


# ---------------------------------------------------------------- summarise: exact arithmetic
def test_summary_metrics_exact():
    s = metrics.summarise(TRACE, duration_s=2.0)
    assert (s["requests"], s["successes"], s["failures"]) == (3, 2, 1)
    assert s["error_rate"] == pytest.approx(1 / 3)
    assert s["errors"] == {"ConnectError": 1}
    assert s["ttft_ms"] == {"mean": pytest.approx(400), "p50": pytest.approx(400), "p90": pytest.approx(480),
                            "p99": pytest.approx(498), "n": 2}
    # TPOT: (1.1 - 0.5) / (4 - 1) = 0.2 s and (0.5 - 0.3) / (2 - 1) = 0.2 s
    assert s["tpot_ms"]["mean"] == pytest.approx(200) and s["tpot_ms"]["n"] == 2
    # ITL: gaps 0.1, 0.2, 0.2 and 0.2 s
    assert s["itl_ms"]["mean"] == pytest.approx(175) and s["itl_ms"]["p50"] == pytest.approx(200)
    assert s["itl_ms"]["n"] == 4
    assert s["e2el_ms"]["mean"] == pytest.approx(800)
    assert s["request_throughput"] == pytest.approx(1.0)        # 2 successes / 2 s
    assert s["output_throughput"] == pytest.approx(3.0)         # (4 + 2) tokens / 2 s
    assert s["total_token_throughput"] == pytest.approx(18.0)   # (6 + 30) / 2 s
    assert s["stream_decode_tok_s"] == pytest.approx(5.0)       # (3 + 1) tokens / (0.6 + 0.2) s
    assert s["server_decode_tok_s"] == pytest.approx(15.0)
    assert s["prompt_tokens_mean"] == pytest.approx(15.0) and s["output_tokens_mean"] == pytest.approx(3.0)
    assert s["cached_fraction"] == pytest.approx(5 / 30)
    assert s["goodput"] is None


def test_goodput_counts_requests_meeting_every_slo():
    s = metrics.summarise(TRACE, 2.0, slo={"ttft_ms": 400})
    assert s["goodput"] == {"slo": {"ttft_ms": 400}, "good_requests": 1, "goodput_req_s": pytest.approx(0.5),
                            "fraction": pytest.approx(1 / 3)}
    both = metrics.summarise(TRACE, 2.0, slo={"ttft_ms": 600, "tpot_ms": 150})
    assert both["goodput"]["good_requests"] == 0  # both TPOTs are 200 ms
    with pytest.raises(ValueError, match="unknown SLO"):
        metrics.summarise(TRACE, 2.0, slo={"latency": 1})


def test_nothing_succeeded_gives_none_never_zero():
    s = metrics.summarise([failed(0), failed(1, "HTTP 503: loading")], duration_s=3.0, slo={"ttft_ms": 1000})
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "stream_decode_tok_s",
                "server_decode_tok_s", "output_tokens_mean", "prompt_tokens_mean", "cached_fraction"):
        assert s[key] is None, key
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert s[key] == {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    assert s["goodput"]["goodput_req_s"] is None and s["goodput"]["fraction"] is None
    assert s["error_rate"] == 1.0
    assert not s["validity"]["valid"]
    assert any("no request succeeded" in r for r in s["validity"]["reasons"])
    empty = metrics.summarise([], 1.0)
    assert empty["error_rate"] is None and empty["request_throughput"] is None


def test_validity_reasons():
    short = metrics.summarise(TRACE, 2.0, criteria=Criteria(min_duration_s=5, min_successes=4, max_error_rate=0.05))
    reasons = " | ".join(short["validity"]["reasons"])
    assert "2.00 s < 5 s" in reasons
    assert "2 successful requests < 4" in reasons
    assert "error rate 33% > 5%" in reasons
    assert short["validity"]["valid"] is False
    fine = metrics.summarise(TRACE[:2], 10.0, criteria=Criteria(min_duration_s=5, min_successes=2, max_cached_fraction=0.1))
    assert fine["validity"]["valid"] is True
    assert "prompt cache" in fine["validity"]["warnings"][0]  # 5 of 30 prompt tokens were cached


def test_missing_usage_is_a_warning_and_tpot_unknown():
    r = ok(0, 0.0, 0.1, [0.1, 0.2], 0.3, None)
    s = metrics.summarise([r], 10.0, criteria=Criteria(min_successes=1))
    assert s["tpot_ms"]["n"] == 0 and s["output_throughput"] is None
    assert s["requests_without_usage"] == 1 and "no usage" in s["validity"]["warnings"][0]


def test_percentile_matches_linear_interpolation():
    xs = [3.0, 1.0, 4.0, 1.5, 9.0]
    assert metrics.percentile(xs, 50) == 3.0
    assert metrics.percentile(xs, 90) == pytest.approx(7.0)  # numpy: 4 + 0.6 x (9 - 4)
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([2.0], 99) == 2.0


# ---------------------------------------------------------------- measure: stream parsing
def run_mock(handler, endpoint="completions"):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            target = loadgen.Target("http://mock", max_tokens=8, endpoint=endpoint)
            return await loadgen.stream_request(client, target, "hi", 0, time.perf_counter())
    return asyncio.run(go())


def sse(*events):
    return "".join(f"data: {e}\n\n" for e in events).encode()


def test_tokens_come_from_usage_not_chunks():
    body = sse('{"choices":[{"text":"Hello"}]}', '{"choices":[{"text":" world"}]}',
               '{"choices":[{"text":"","finish_reason":"length"}],"usage":{"completion_tokens":7,"prompt_tokens":3,'
               '"prompt_tokens_details":{"cached_tokens":2}},"timings":{"predicted_per_second":99.0,"cache_n":2}}',
               "[DONE]")
    r = run_mock(lambda req: httpx.Response(200, content=body))
    assert r.success and r.error is None
    assert (r.output_tokens, r.prompt_tokens, r.cached_tokens) == (7, 3, 2)
    assert len(r.chunk_times_s) == 2 and r.ttft_s == r.chunk_times_s[0]
    assert r.output_chars == len("Hello world") and r.server_timings["predicted_per_second"] == 99.0


def test_chat_deltas_are_parsed():
    body = sse('{"choices":[{"delta":{"role":"assistant"}}]}', '{"choices":[{"delta":{"content":"Hi"}}]}',
               '{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":30}}', "[DONE]")
    r = run_mock(lambda req: httpx.Response(200, content=body), endpoint="chat")
    assert r.success and len(r.chunk_times_s) == 1 and r.output_tokens == 1  # the role-only chunk is not a token


@pytest.mark.parametrize("response,error", [
    (httpx.Response(503, content=b'{"error":"Loading model"}'), "HTTP 503"),
    (httpx.Response(200, content=sse('{"choices":[{"text":"a"}]}')), "without [DONE]"),
    (httpx.Response(200, content=sse('{"error":{"message":"context full"}}')), "server error in stream"),
    (httpx.Response(200, content=sse("[DONE]")), "no generated text"),
])
def test_failures_are_recorded_not_raised(response, error):
    r = run_mock(lambda req: response)
    assert not r.success and error in r.error
    assert r.e2el_s is not None


def test_connection_failure_is_recorded():
    def refuse(request):
        raise httpx.ConnectError("connection refused")
    r = run_mock(refuse)
    assert not r.success and r.error.startswith("ConnectError")


# ---------------------------------------------------------------- orchestrate: against the local source
def max_in_flight(results):
    events = sorted([(r.start_s, 1) for r in results] + [(r.start_s + r.e2el_s, -1) for r in results],
                    key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.tools
def test_fixed_concurrency_and_request_budget():
    with bench_source.running() as url:
        target = loadgen.Target(url + "/i5", max_tokens=10, ignore_eos=False)
        run = loadgen.run_load(target, loadgen.make_prompts(10, 6), loadgen.LoadSpec(concurrency=3, max_requests=9))
    assert len(run.warmup) == 1 and len(run.results) == 9
    assert all(r.success and r.output_tokens == 10 for r in run.results)
    assert max_in_flight(run.results) <= 3
    assert metrics.summarise_run(run)["concurrency"] == 3


@pytest.mark.tools
def test_time_budget_stops_sending():
    with bench_source.running() as url:
        target = loadgen.Target(url + "/i20", max_tokens=10, ignore_eos=False)  # ~0.2 s per request
        run = loadgen.run_load(target, loadgen.make_prompts(100, 6),
                               loadgen.LoadSpec(concurrency=1, duration_s=0.5, warmup_requests=0))
    # What holds however loaded the machine (no count in a time window): it sent one request at a time, kept
    # sending until the 0.5 s ran out (duration) and then stopped (far fewer than the 100 prompts), and every
    # request but the last ended inside the budget (the next one was sent after it ended and before the budget's end)
    done = run.results
    assert done and all(r.success for r in done) and len(done) < 100
    assert all(b.start_s >= a.start_s + a.e2el_s for a, b in zip(done, done[1:]))
    assert all(r.start_s + r.e2el_s < 0.5 for r in done[:-1])
    assert run.duration_s >= 0.5


@pytest.mark.tools
def test_poisson_arrivals_are_seeded():
    with bench_source.running() as url:
        target = loadgen.Target(url + "/i0", max_tokens=2, ignore_eos=False)
        spec = loadgen.LoadSpec(concurrency=None, request_rate=50.0, max_requests=8, warmup_requests=0, seed=7)
        runs = [loadgen.run_load(target, loadgen.make_prompts(8, 4), spec) for _ in range(2)]
    # Each request is sent after the seeded arrival gaps before it have passed: the schedule is the seed's,
    # the same in both runs. A loaded machine only sends later (no upper bound here), never earlier.
    rng, schedule, t = random.Random(7), [], 0.0
    for _ in range(8):
        t += rng.expovariate(50.0)
        schedule.append(t)
    for run in runs:
        starts = [r.start_s for r in run.results]
        assert all(b > a for a, b in zip(starts, starts[1:]))
        assert all(start >= due - 1e-3 for start, due in zip(starts, schedule)), (starts, schedule)


def test_load_spec_needs_a_budget_and_a_shape():
    with pytest.raises(ValueError, match="budget"):
        loadgen.LoadSpec(concurrency=1)
    with pytest.raises(ValueError, match="concurrency, request_rate"):
        loadgen.LoadSpec(concurrency=None, max_requests=3)


def test_prompts_differ_from_the_first_word():
    prompts = loadgen.make_prompts(5, 20, seed=1)
    assert len({p.split(":")[0] for p in prompts}) == 5
    assert all(len(p.split()) == 20 for p in prompts)
    assert loadgen.make_prompts(3, 10, seed=1, tag="x") == loadgen.make_prompts(3, 10, seed=1, tag="x")


@pytest.mark.tools
def test_run_load_works_inside_a_running_event_loop():
    async def inside_loop():  # what a notebook cell is
        with bench_source.running() as url:
            target = loadgen.Target(url + "/i0", max_tokens=3, ignore_eos=False)
            return loadgen.run_load(target, loadgen.make_prompts(3, 4), loadgen.LoadSpec(concurrency=2, max_requests=2))
    run = asyncio.run(inside_loop())
    assert [r.success for r in run.results] == [True, True]


# ---------------------------------------------------------------- integration: a real server dies mid-sweep
@pytest.mark.tools
def test_server_killed_mid_run_counts_failures_and_keeps_records(tmp_path):
    from lab.core import profiles
    from lab.serving import engines, serve

    prof = profiles.load("cpu-default")
    cmd = engines.build_command(prof, port=serve.free_port())
    srv = serve.start(cmd, log_dir=tmp_path, name="bench_kill")
    try:
        target = loadgen.Target(srv.base_url, model=serve.model_name(srv), max_tokens=24, api_key=srv.api_key)
        one = loadgen.run_load(target, loadgen.make_prompts(1, 32, seed=3),
                               loadgen.LoadSpec(concurrency=1, max_requests=1, warmup_requests=0))
        assert one.results[0].success, one.results[0].error
        # Two requests in flight at a time; the first result's callback holds the load's event loop (it runs there)
        # until the server is killed: then the other first request is in flight or done, and the four not yet
        # sent fail, whatever the machine's load (no sleep decides it)
        first_done, killed = threading.Event(), threading.Event()

        def hold_after_first(result):
            if not first_done.is_set():
                first_done.set()
                killed.wait(timeout=120)

        box = {}
        worker = threading.Thread(target=lambda: box.update(run=loadgen.run_load(
            target, loadgen.make_prompts(6, 32, seed=4), loadgen.LoadSpec(concurrency=2, max_requests=6, warmup_requests=0),
            on_result=hold_after_first)))
        worker.start()
        assert first_done.wait(timeout=120)
        os.killpg(srv.pid, signal.SIGKILL)
        killed.set()
        worker.join(timeout=120)
        assert not worker.is_alive()
    finally:
        report = srv.stop()
    run = box["run"]
    s = metrics.summarise_run(run)
    from conftest import record_figure

    record_figure("server SIGKILLed mid-benchmark: requests recorded", 6, len(run.results),
                  f"{s['successes']} ok, {s['failures']} failures counted, left running: {report['left_running']}")
    assert len(run.results) == 6  # every request has a record, none raised
    assert 1 <= s["successes"] <= 2 and s["failures"] >= 4 and s["successes"] + s["failures"] == 6
    assert all(r.error for r in run.results if not r.success)
    assert s["error_rate"] == pytest.approx(s["failures"] / 6)
    assert s["validity"]["valid"] is False and any("error rate" in x for x in s["validity"]["reasons"])
    assert report["left_running"] == []


# ---------------------------------------------------------------- a level measured as repetitions (issue 20)
def _rep(start_perf, results, duration, concurrency=2, max_requests=2, duration_s=None):
    spec = loadgen.LoadSpec(concurrency=concurrency, max_requests=max_requests, duration_s=duration_s, warmup_requests=0)
    return loadgen.RunResult(spec, "t", results, duration, [], "2026-12-01T00:00:00Z", 0.5, 8, start_perf,
                             start_perf + duration)


def test_shares_split_the_level_budget():
    assert load_levels.shares(8, 3) == [3, 3, 2] and load_levels.shares(48, 3) == [16, 16, 16]
    assert load_levels.shares(2, 3) == [1, 1] and load_levels.shares(6, 1) == [6]


def test_repetitions_pool_into_one_level_with_each_repetition_s_figures():
    # three repetitions of 2 requests, 4 output tokens each (3 decoded after the first), back to back
    reps = [_rep(10.0 + 3 * j, [ok(0, 0.0, 0.5, [0.5, 0.7, 0.9, 1.1], 1.1, 4, timings={"predicted_per_second": 5.0}),
                                ok(1, 0.1, 0.6, [0.6, 0.8, 1.0, 1.2], 1.2 + j * 0.3, 4)], 2.0 + j, duration_s=10.0)
            for j in range(3)]
    warm = [ok(-1, 0.0, 0.2, [0.2], 0.3, 1)]
    level = load_levels.pool(reps, warm, {"rounds": [], "steady": False})
    assert [r.repetition for r in level.results] == [1, 1, 2, 2, 3, 3]
    assert [r.start_s for r in level.results] == pytest.approx([0.0, 0.1, 3.0, 3.1, 6.0, 6.1])  # from the level's start
    assert level.duration_s == 9.0 and level.client_cpu_s == 1.5 and level.t1_perf == 10.0 + 6 + 4.0
    assert level.spec.max_requests == 6 and level.spec.duration_s == 30.0 and level.warmup == warm
    s = metrics.summarise_run(level, criteria=Criteria(min_duration_s=3.0, min_successes=4))
    assert s["validity"]["valid"]  # the level as a whole: 6 requests in 9 s, though each repetition has 2
    assert s["output_throughput"] == pytest.approx(24 / 9.0)
    assert [r["output_throughput"] for r in s["repetitions"]] == pytest.approx([8 / 2.0, 8 / 3.0, 8 / 4.0])
    spread = s["spread"]["output_throughput"]
    assert spread["mean"] == pytest.approx((4 + 8 / 3 + 2) / 3) and spread["min"] == 2.0 and spread["max"] == 4.0
    assert spread["sd"] == pytest.approx(1.0184, abs=1e-4) and spread["n"] == 3
    # decode only: 3 tokens in 0.6 s and 0.6 + 0.3 j s per request; summed over the 2 streams of the level
    first = s["repetitions"][0]
    assert first["stream_decode_tok_s"] == pytest.approx(6 / 1.2) and first["decode_tok_s_summed"] == pytest.approx(10.0)
    assert s["decode_tok_s_summed"] == pytest.approx(2 * s["stream_decode_tok_s"])
    assert s["prefill_tok_s"] == pytest.approx(60 / (3 * (0.5 + 0.6)))  # 10 prompt tokens per request over its TTFT
    assert s["warmup"] == {"rounds": [], "steady": False}


def test_a_single_run_has_no_repetitions_or_spread():
    s = metrics.summarise_run(_rep(0.0, TRACE[:2], 2.0))
    assert s["repetitions"] == [] and s["spread"] == {} and s["warmup"] is None
    assert s["decode_tok_s_summed"] == pytest.approx(2 * s["stream_decode_tok_s"])


@pytest.mark.tools
def test_sweep_warms_up_until_steady_then_repeats_each_level():
    with bench_source.running() as url:
        target = loadgen.Target(url + "/i5", max_tokens=12, ignore_eos=False)
        runs = load_levels.sweep(target, [1, 3], 9, 6, repetitions=3, warmup_max_rounds=4, warmup_output_tokens=6)
    for run, level in zip(runs, [1, 3]):
        assert [rep["requests"] for rep in run.repetitions] == [3, 3, 3] and len(run.results) == 9
        assert all(r.success and r.output_tokens == 12 for r in run.results)
        rounds = run.warmup_rounds["rounds"]
        assert 2 <= len(rounds) <= 4 and all(x["requests"] == level for x in rounds)
        assert len(run.warmup) == level * len(rounds) and all(r.output_tokens == 6 for r in run.warmup)
        assert run.warmup_rounds["steady"] == (rounds[-1]["change"] < 0.05)
        assert run.duration_s == pytest.approx(sum(rep["duration_s"] for rep in run.repetitions))
        s = metrics.summarise_run(run)
        assert len(s["repetitions"]) == 3 and s["spread"]["output_throughput"]["n"] == 3
