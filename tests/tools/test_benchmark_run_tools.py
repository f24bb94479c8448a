"""The tools tier of tests/unit/test_benchmark_run.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest

from lab.core import evidence, profiles, run_folder
from lab.measure import metrics
from lab.pages import benchmark_run
from lab.pages import benchmark, benchmark_tables
from lab.predict import profile_speed


@pytest.mark.tools  # asks the installed engine for its version (a process), as the notebook does
def test_a_profile_that_cannot_start_here_goes_through_every_step_as_skipped(tmp_path):
    if evidence.gpu_summary()["gpus"]:
        pytest.skip("not for this machine: it has a GPU, the V100 profile might start")
    prof = profiles.load("v100-32g-x1")
    served = benchmark_run.serve_and_sweep(prof, tmp_path, tmp_path / "logs")
    assert served.skip_reason and served.started is None and served.stop_report is None and served.reported == {}
    assert served.runs == served.summaries == [] and served.busy is None and served.peer["skipped"]
    assert benchmark.start_text(served) == f"{served.command.shell()}\nskipped: {served.skip_reason}"
    assert benchmark.stop_text(served) == "server stopped: None"
    assert repr(benchmark_tables.requests_table(served.runs)) == "benchmark skipped"
    assert repr(benchmark_tables.sweep_table(served.summaries)) == "benchmark skipped"
    assert benchmark.client_cpu_text(served.runs) == "no runs"

    lb, lb_skip = benchmark_run.in_process(prof, served.summaries)
    assert lb is None and benchmark.llama_bench_text(lb, lb_skip) == f"llama-bench skipped: {lb_skip}"
    assert benchmark_tables.llama_bench_rows(lb) == [] and benchmark_run.in_process_tok_s(lb) is None
    batched, batched_skip = benchmark_run.in_process_batched(prof, served, tmp_path / "logs")
    assert batched is None and "GPU" in batched_skip
    assert benchmark.batched_bench_text(batched, batched_skip) == f"llama-batched-bench skipped: {batched_skip}"
    yard = benchmark_run.yardstick_rows(served, batched, lb)
    assert [r["served_over_in_process"] for r in yard] == [None]  # the single-stream row, nothing to divide
    rl, queue = profile_speed.roofline_for(prof), metrics.queueing(served.summaries)
    found = benchmark_run.checks(prof, served, lb, rl, None, queue)
    assert (found[0].name, found[0].status, found[0].fix) == ("benchmark ran", "skip", served.skip_reason)
    verdicts = benchmark_run.claim_verdicts(prof, served.summaries)
    record = benchmark.build_record(prof, served=served, llama_bench_result=lb, llama_bench_skip=lb_skip,
                                      roofline_result=rl, capacity=None, verdicts=verdicts, found=found, queue=queue,
                                      sweep_fig=None, energy_fig=None, batched=batched, batched_skip=batched_skip,
                                      yardstick=yard)
    assert record["summary"]["batched_bench_skipped"] == batched_skip and record["yardstick"] == yard
    assert record["summary"]["benchmark_skipped"] == served.skip_reason and record["server"]["stop"] is None
    assert record["server"]["command"] == served.command.shell() and record["resources"]["load"] == served.load_window
    assert [c["title"] for c in record["charts"]][-1] == "Benchmark checks"
    assert benchmark.closing_text(record).startswith(f"- No server was measured here: {served.skip_reason}")
    # the same steps kept by lab.pages.benchmark_steps as notebook 06's cells run them; the page builds the record
    from lab.core import session
    from lab.pages import benchmark_steps

    steps = benchmark_steps.Steps(session.Session(prof, profiles.resolve("v100-32g-x1"), tmp_path))
    steps.profile, steps.rl, steps.served, steps.llama_bench, steps.batched = prof, rl, served, (lb, lb_skip), (batched, batched_skip)
    steps.s.results["steps"] = steps  # as benchmark.steps(s) keeps them
    shown = benchmark.record(steps.s)
    written = run_folder.read_records(tmp_path)["06_benchmark"]
    assert shown == written["summary"] and written["what_this_means"] == benchmark.closing_text(written)
    assert written["yardstick"] == yard and [c["name"] for c in written["checks"]] == [c.name for c in found]
    assert [c["title"] for c in written["charts"]][:3] == [
        "Throughput and latency by concurrency vs the roofline",
        "Decode summed: steady state vs the whole level vs llama-batched-bench", "Energy and memory by concurrency"]
