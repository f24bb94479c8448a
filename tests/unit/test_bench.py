"""The load generator: metric arithmetic on hand-made traces (exact), stream parsing, load shapes
against a local source, and a real llama-server killed mid-sweep (integration)."""
import asyncio
import time

import httpx
import pytest

from lab.measure import load_levels, loadgen, metrics
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


def test_tokens_streamed_as_empty_deltas_are_timed_by_their_chunks():
    # vLLM on the lent H100 (outputs/h100-vllm/, 2026-12-07): with random weights 11 of 48 requests streamed their
    # 128 tokens as empty deltas (special tokens, not shown); `vllm bench serve` counted them, so the lab does too
    body = sse('{"choices":[{"text":""}]}', '{"choices":[{"text":""}]}',
               '{"choices":[{"text":"","finish_reason":"length"}]}',
               '{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":5}}', "[DONE]")
    r = run_mock(lambda req: httpx.Response(200, content=body))
    assert r.success and r.output_tokens == 3 and r.output_chars == 0
    assert len(r.chunk_times_s) == 3 and r.ttft_s == r.chunk_times_s[0] == r.first_choice_s
    assert r.findings == ["no text: 3 token(s) arrived as 3 empty chunk(s) (special tokens not shown); timed by those chunks"]
    # the same empty chunks with no token counted stay a failure; a stream with text is timed by its text as before
    no_tokens = body.replace(b'"completion_tokens":3', b'"completion_tokens":0')
    assert run_mock(lambda req: httpx.Response(200, content=no_tokens)).error == "no generated text in the stream"
    mixed = sse('{"choices":[{"text":""}]}', '{"choices":[{"text":"a"}]}', "[DONE]")
    r = run_mock(lambda req: httpx.Response(200, content=mixed))
    assert r.success and len(r.chunk_times_s) == 1 and r.findings == []


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
