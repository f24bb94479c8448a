"""lab.measure.bench_run (notebook 06's steps, one call each) and the views notebook 06 shows between them
(lab.pages.benchmark): a profile that cannot start here goes through every step as skipped, saying why, and
the record and closing text are built from that; the decode-speed table divides by llama-bench's speed."""
import pytest

from lab.core import evidence, profiles
from lab.measure import bench_run, metrics
from lab.pages import benchmark
from lab.predict import profile_speed


@pytest.mark.tools  # asks the installed engine for its version (a process), as the notebook does
def test_a_profile_that_cannot_start_here_goes_through_every_step_as_skipped(tmp_path):
    if evidence.gpu_summary()["gpus"]:
        pytest.skip("this machine has a GPU: the V100 profile might start")
    prof = profiles.load("v100-32g-x1")
    served = bench_run.serve_and_sweep(prof, tmp_path, tmp_path / "logs")
    assert served.skip_reason and served.started is None and served.stop_report is None and served.reported == {}
    assert served.runs == served.summaries == [] and served.busy is None and served.peer["skipped"]
    assert benchmark.start_text(served) == f"{served.command.shell()}\nskipped: {served.skip_reason}"
    assert benchmark.stop_text(served) == "server stopped: None"
    assert repr(benchmark.requests_table(served.runs)) == "benchmark skipped"
    assert repr(benchmark.sweep_table(served.summaries)) == "benchmark skipped"
    assert benchmark.client_cpu_text(served.runs) == "no runs"

    lb, lb_skip = bench_run.in_process(prof, served.summaries)
    assert lb is None and benchmark.llama_bench_text(lb, lb_skip) == f"llama-bench skipped: {lb_skip}"
    assert benchmark.llama_bench_rows(lb) == [] and bench_run.in_process_tok_s(lb) is None
    batched, batched_skip = bench_run.in_process_batched(prof, served, tmp_path / "logs")
    assert batched is None and "GPU" in batched_skip
    assert benchmark.batched_bench_text(batched, batched_skip) == f"llama-batched-bench skipped: {batched_skip}"
    yard = bench_run.yardstick_rows(served, batched, lb)
    assert [r["served_over_in_process"] for r in yard] == [None]  # the single-stream row, nothing to divide
    rl, queue = profile_speed.roofline_for(prof), metrics.queueing(served.summaries)
    found = bench_run.checks(prof, served, lb, rl, None, queue)
    assert (found[0].name, found[0].status, found[0].fix) == ("benchmark ran", "skip", served.skip_reason)
    verdicts = bench_run.claim_verdicts(prof, served.summaries)
    record = benchmark.build_record(prof, served=served, llama_bench_result=lb, llama_bench_skip=lb_skip,
                                      roofline_result=rl, capacity=None, verdicts=verdicts, found=found, queue=queue,
                                      sweep_fig=None, energy_fig=None, batched=batched, batched_skip=batched_skip,
                                      yardstick=yard)
    assert record["summary"]["batched_bench_skipped"] == batched_skip and record["yardstick"] == yard
    assert record["summary"]["benchmark_skipped"] == served.skip_reason and record["server"]["stop"] is None
    assert record["server"]["command"] == served.command.shell() and record["resources"]["load"] == served.load_window
    assert [c["title"] for c in record["charts"]][-1] == "Benchmark checks"
    assert benchmark.closing_text(record).startswith(f"- No server was measured here: {served.skip_reason}")
    # the same steps kept by lab.measure.bench_steps as notebook 06's cells run them; the page builds the record
    from lab.core import session
    from lab.measure import bench_steps

    steps = bench_steps.Steps(session.Session(prof, profiles.resolve("v100-32g-x1"), tmp_path))
    steps.profile, steps.rl, steps.served, steps.llama_bench, steps.batched = prof, rl, served, (lb, lb_skip), (batched, batched_skip)
    shown = benchmark.record(steps)
    written = evidence.read_records(tmp_path)["06_benchmark"]
    assert shown == written["summary"] and written["what_this_means"] == benchmark.closing_text(written)
    assert written["yardstick"] == yard and [c["name"] for c in written["checks"]] == [c.name for c in found]
    assert [c["title"] for c in written["charts"]][:2] == ["Throughput and latency by concurrency vs the roofline",
                                                          "Energy and memory by concurrency"]


def test_decode_speeds_are_divided_by_the_in_process_speed():
    single = {"server_decode_tok_s": 90.0, "stream_decode_tok_s": 80.0}
    rl = {"decode_ceiling_tok_s": 400.0, "predicted_decode_tok_s": 150.0}
    rows = benchmark.decode_speeds_table(single, 100.0, rl).to_dict(orient="records")
    assert [(r["tok/s"], r["÷ in-process"]) for r in rows] == [(100.0, 1.0), (90.0, 0.9), (80.0, 0.8), (400.0, 4.0),
                                                               (150.0, 1.5)]
    unmeasured = benchmark.decode_speeds_table(None, None, rl).to_dict(orient="records")
    assert [r["÷ in-process"] for r in unmeasured] == [None] * 5 and unmeasured[3]["tok/s"] == 400.0
    assert bench_run.single_stream([]) is None and bench_run.single_stream([single, {}]) is single


def test_served_over_in_process_per_level_says_what_limits_it():
    """lab.measure.yardstick on hand numbers; llama-server's fixed per-token cost is lab/data/served_overhead.yaml's
    largest, the H200 hybrid's 1/82.8 − 1/91.1 s = 1.100 ms (outputs/h200-x1/20261202T012616Z_isolate)."""
    from lab.measure import yardstick

    cost_ms = metrics.served_cost_s()[0] * 1e3
    assert cost_ms == pytest.approx(1.100, abs=1e-3)
    sweep = [{"concurrency": 1, "stream_decode_tok_s": 80.0, "decode_tok_s_summed": 80.0, "output_throughput": 75.0},
             {"concurrency": 4, "stream_decode_tok_s": 60.0, "decode_tok_s_summed": 240.0, "output_throughput": 200.0},
             {"concurrency": 16, "stream_decode_tok_s": 15.0, "decode_tok_s_summed": 240.0, "output_throughput": 230.0}]
    batched = {"by_parallel": {1: {"speed_tg": 85.0, "output_tok_s": 80.0}, 4: {"speed_tg": 250.0, "output_tok_s": 230.0},
                               16: {"speed_tg": 600.0, "output_tok_s": 500.0}}}
    lb = {"tg": {"tok_s": 90.0, "test": "tg256@d512"}}
    rows = yardstick.rows(sweep, batched, lb)
    assert [r["concurrency"] for r in rows] == [1, 1, 4, 16]
    single = rows[0]
    assert single["served_over_in_process"] == pytest.approx(80 / 90) and single["yardstick"] == "llama-bench tg256@d512"
    assert "caps it at 0.91" in single["limited_by"]  # 1 / (1 + 1.100 ms × 90 tok/s)
    four, sixteen = rows[2], rows[3]
    assert four["served_over_in_process"] == pytest.approx(0.96) and four["limited_by"].startswith("the engine's own")
    # 16 streams: 16000/240 − 16000/600 = 40 ms more per step, over 1.5 × 16 × 1.100 ms: per-request work
    assert sixteen["extra_ms_per_step"] == pytest.approx(40.0) and sixteen["limited_by"].startswith("per-request work")
    assert sixteen["output_ratio"] == pytest.approx(230 / 500)
    slow = yardstick.level_row({"concurrency": 16, "decode_tok_s_summed": 480.0}, {"speed_tg": 600.0})
    assert slow["extra_ms_per_step"] == pytest.approx(16000 / 480 - 16000 / 600)  # 6.7 ms ≤ 1.5 × 16 × 1.100
    assert slow["limited_by"].startswith("llama-server's per-token work")
    missing = yardstick.rows(sweep[:1], None, None)
    assert [r["served_over_in_process"] for r in missing] == [None, None] and "not measured" in missing[1]["limited_by"]
