"""The tools tier of tests/unit/test_bench.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import asyncio
import os
import random
import signal
import threading

import pytest

from lab.measure import bench_source, load_levels, loadgen, metrics


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
