"""Issue 45 (hostile inputs, round four), what a server reports:

1. a server's counts (usage) never reach a local command or a record unbounded: shapes.Count drops a count past
   10^8 or below 0, llama-bench's depth is the server's prompt count only when it is one (1 .. 4x the prompt + 512,
   within the context), else the profile's with a note; and notebook 06 writes the sweep's record as soon as the
   sweep is measured, so a failure after it (llama-bench at a wild depth, a schema error) keeps the sweep on disk;
2. a stream without an end is cut by an event and byte budget (one 125 s warm-up request made a 209 MB record);
   /v1/models entries are kept bounded and a wrong field found 20,000 times is one finding, counted;
9. a key the server itself cut short is not half kept.
FAKE servers (threads, tests/fake_endpoints.py) play the endpoints. Each item prints tried / handled."""
from __future__ import annotations

import json
import math

import pytest

from conftest import record_figure
from fake_endpoints import QuietJSONHandler, serving
from shared_reliability_hostile_servers import KEY

from lab.core import profiles, record_schema, redaction, run_folder, session
from lab.measure import loadgen, metrics
from lab.pages import benchmark, benchmark_run
from lab.predict import profile_speed
from lab.serving import endpoint, shapes


def _streaming(prompt_tokens, chunks: int = 4, done: bool = True, forever: bool = False):
    """A /v1/completions that streams `chunks` one-token chunks, then usage with `prompt_tokens` and [DONE]; with
    `forever`, tiny chunks without end and no [DONE]."""

    class Stream(QuietJSONHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                n = 0
                while forever or n < chunks:
                    n += 1
                    self.wfile.write(b'data: {"choices":[{"index":0,"text":"a"}]}\n\n')
                if forever:
                    return
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": chunks}
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
            except OSError:
                pass
    return Stream


def _run(base: str, max_tokens: int = 4, requests: int = 2) -> loadgen.RunResult:
    target = loadgen.Target(base, "m", max_tokens=max_tokens, timeout_s=60)
    return loadgen.run_load(target, ["hi"] * requests, loadgen.LoadSpec(concurrency=1, max_requests=requests,
                                                                         warmup_requests=0))


# ---------------------------------------------------------------- 1. counts → depth and records
COUNTS = [10 ** 18, 30_000, -5, 0, 2 ** 63, 1.5e300, "130", True, None, 10 ** 8 + 1]


def test_a_servers_counts_never_reach_llama_bench_or_a_record_unbounded():
    prof = profiles.load("cpu-default")  # bench_prompt_tokens 128 (or the profile's): the depth asked
    asked = prof.bench_prompt_tokens
    most = max(asked, min(asked * benchmark_run.SERVED_DEPTH_FACTOR + benchmark_run.SERVED_DEPTH_SLACK,
                          prof.context_tokens - prof.bench_output_tokens))
    results = {}
    for count in COUNTS:  # as the stream reports it: shapes.Count takes it or drops it with a finding
        with serving(_streaming(count)) as base:
            run = _run(base)
        kept = {r.prompt_tokens for r in run.results}
        summary = metrics.summarise_run(run)
        depth, note = benchmark_run.served_depth_checked(prof, [summary])
        number = int(count) if isinstance(count, str) else count  # a numeric string is read as its number (shapes)
        in_range = isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= most
        results[f"usage.prompt_tokens {count!r:.24}"] = (
            all(r.success for r in run.results) and (kept <= {None} or all(0 <= k <= shapes.MAX_COUNT for k in kept))
            and (depth == number if in_range else depth == asked) and 1 <= depth <= most
            and (note is None) == (in_range or summary.prompt_tokens_mean is None))
    for mean in (float("nan"), float("inf"), -1.0, 0.4, 5e17, "x", [1]):  # a summary edited by hand, a peer's
        depth, note = benchmark_run.served_depth_checked(prof, [{"prompt_tokens_mean": mean}])
        results[f"prompt_tokens_mean {mean!r:.12}"] = depth == asked and note and "instead" in note
    depth, note = benchmark_run.served_depth_checked(prof, [{"prompt_tokens_mean": asked + 7.4}])
    results["a chat template's few tokens: taken"] = depth == asked + 7 and note is None
    for field in ("n_ctx", "total_slots", "max_model_len", "cache_n"):  # every count a server reports
        shape = {"n_ctx": ("llama.props", {"default_generation_settings": {"n_ctx": 10 ** 18}}),
                 "total_slots": ("llama.props", {"total_slots": -1}),
                 "max_model_len": ("models", {"data": [{"id": "m", "max_model_len": 2 ** 63}]}),
                 "cache_n": ("chunk", {"choices": [], "timings": {"cache_n": -7}})}[field]
        data, found = shapes.clean(shape[0], shape[1], "GET /x")
        results[f"{field} out of range: dropped, said"] = field not in json.dumps(data) and len(found) == 1
    record_figure("issue 45 item 1: a server's counts to llama-bench's depth and the records (capped, or the "
                  "profile's with a note)", len(results), sum(map(bool, results.values())),
                  "not handled: " + ", ".join(k for k, v in results.items() if not v) if not all(results.values())
                  else f"depth taken in 1..{most:,} for a {asked}-token prompt")
    assert all(results.values()), results


def _served(prof, run) -> benchmark_run.ServedSweep:
    from lab.measure import peer_bench
    from lab.serving import engines

    return benchmark_run.ServedSweep(
        command=engines.build_command(prof, model_path="/m.gguf"), skip_reason=None, started="fake: healthy",
        load_window={}, prompt_words=4, tokens_per_word=None, target="fake", runs=[run],
        summaries=[metrics.summarise_run(run)], busy=None, peer=peer_bench.run(prof, None, "/nonexistent"),
        stop_report=None, reported={})


def test_the_sweep_is_on_disk_before_anything_derived_from_the_server_can_fail(tmp_path, monkeypatch, clean_display):
    """Notebook 06's page writes the sweep's record right after the sweep; a failure after it (llama-bench at a
    depth from the server, a record key the schema does not name) leaves the sweep measured, on disk."""
    prof = profiles.load("cpu-default")
    with serving(_streaming(30_000)) as base:
        run = _run(base, requests=3)
    results = {}
    for case in ("llama-bench fails after the sweep", "a schema error in the record"):
        s = session.Session(prof, profiles.resolve("cpu-default").resolve(), tmp_path / case.split()[0])
        steps = benchmark.steps(s)
        steps.profile, steps.rl = prof, profile_speed.roofline_for(prof)  # the datasheet's: nothing measured here
        monkeypatch.setattr(benchmark_run, "serve_and_sweep", lambda *a, **k: _served(prof, run))
        raised = None
        if case.startswith("a schema"):
            real = benchmark.build_record
            monkeypatch.setattr(benchmark, "build_record", lambda *a, **k: {**real(*a, **k), "new_key": 1})
        try:
            benchmark.serve_and_sweep(steps, prof)
            if case.startswith("llama-bench"):
                raise RuntimeError("stoi")  # what llama-bench -d 500000000000000000 ended in
        except (RuntimeError, record_schema.RecordSchemaError) as exc:
            raised = exc
        monkeypatch.undo()
        kept = run_folder.read_records(s.run_dir).get("06_benchmark") or {}
        results[case] = (raised is not None and len(kept.get("runs") or []) == 1
                         and len(kept["runs"][0]["results"]) == 3 and "partial" in kept
                         and (("invalid" in kept) == case.startswith("a schema")))
    depth, note = benchmark_run.served_depth_checked(prof, [metrics.summarise_run(run)])
    results["30,000 prompt tokens (a proxy's system prompt): the profile's depth"] = (
        depth == prof.bench_prompt_tokens and "30000" in note)
    record_figure("issue 45 item 1: a sweep measured, then a failure: its record on disk", len(results),
                  sum(results.values()))
    assert all(results.values()), results


# ---------------------------------------------------------------- 2. streams without an end, /v1/models floods
def test_a_stream_without_an_end_is_cut_by_its_budget_and_the_models_list_is_bounded():
    results = {}
    with serving(_streaming(0, forever=True)) as base:
        run = _run(base, max_tokens=8, requests=1)
    one = run.results[0]
    events, max_bytes = loadgen.stream_budget(8)
    results["endless tiny chunks: failed, saying budget"] = not one.success and "budget" in (one.error or "")
    results["what was kept is bounded"] = len(one.chunk_times_s) <= events and len(json.dumps(run.to_dict())) < max_bytes
    with serving(_streaming(5, chunks=4)) as base:
        good = _run(base, max_tokens=4, requests=1).results[0]
    results["a plain stream within its budget: ok"] = good.success and good.prompt_tokens == 5

    body = {"object": "list", "data": [{"id": n % 7 if n % 2 else f"dup-{n % 3}", "max_model_len": "x"}
                                       for n in range(20_000)] + [{"id": "m"}]}

    class Models(QuietJSONHandler):
        def do_GET(self):
            return self._send(200, body) if self.path == "/v1/models" else self._send(404, {"error": "no"})
        do_POST = do_GET

    with serving(Models) as base:
        found = endpoint.discover(base, None, "m")
    facts = found["facts"]
    results["findings: one per kind, counted"] = (len(found["findings"]) <= shapes.MAX_FINDINGS_PER_REPLY + 1
                                                  and any("entries)" in f for f in found["findings"]))
    results["model ids: different ones, bounded"] = (len(facts["model_ids"]) == len(set(facts["model_ids"])) <=
                                                     endpoint.MAX_MODEL_IDS and facts["served_model_listed"] is True)
    record_figure("issue 45 item 2: a stream without an end, /v1/models with 20,000 malformed entries", len(results),
                  sum(results.values()), f"budget {events:,} events / {max_bytes >> 20} MiB for max_tokens 8; "
                  f"{len(found['findings'])} finding(s)")
    assert all(results.values()), (results, one.error, found["findings"][:3])


# ---------------------------------------------------------------- 9. a key cut short
def test_a_key_the_server_cut_short_is_not_half_kept(monkeypatch):
    monkeypatch.setenv("ROUND4_SERVER_KEY", KEY)
    echoes = {f"first {n}": f"invalid api key {KEY[:n]}" for n in (8, 12, 20, 32, 63)}
    echoes.update({f"last {n}": f"key …{KEY[-n:]} refused" for n in (8, 16, 40)})
    echoes.update({f"first {n}, JSON": json.dumps({"error": f"bad key {KEY[:n]}…"}) for n in (10, 30)})

    def leaks(text: str) -> bool:
        return any(KEY[i:i + 8].lower() in text.lower() for i in range(len(KEY) - 7))
    kept = {name: redaction.redact(text) for name, text in echoes.items()}
    kept.update({f"{name} (key given)": redaction.redact(text, KEY) for name, text in echoes.items()})
    plain = "model /usr/local/lib/python3.11 loaded with 4096 tokens"  # not a key: untouched
    leaked = [name for name, text in kept.items() if leaks(text)]
    record_figure("issue 45 item 9: a key the server cut short (first or last 8+ characters)", len(kept) + 1,
                  len(kept) - len(leaked) + (redaction.redact(plain) == plain),
                  "leaked: " + ", ".join(leaked) if leaked else "")
    assert not leaked and redaction.redact(plain) == plain, leaked


@pytest.mark.parametrize("value", [1e308, math.inf])
def test_a_count_as_a_huge_float_is_no_count(value):
    data, found = shapes.clean("chunk", {"choices": [], "usage": {"prompt_tokens": value}}, "stream chunk")
    assert "prompt_tokens" not in json.dumps(data) and found
