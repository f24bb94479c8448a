"""lab.pages.benchmark_run (notebook 06's steps, one call each) and the views notebook 06 shows between them
(lab.pages.benchmark, its tables lab.pages.benchmark_tables): a profile that cannot start here goes through every
step as skipped, saying why, and the record and closing text are built from that; the decode-speed table divides by
llama-bench's speed."""
import pytest

from lab.measure import metrics
from lab.pages import benchmark_run
from lab.pages import benchmark, benchmark_tables


def test_decode_speeds_are_divided_by_the_in_process_speed():
    single = {"server_decode_tok_s": 90.0, "stream_decode_tok_s": 80.0}
    rl = {"decode_ceiling_tok_s": 400.0, "predicted_decode_tok_s": 150.0}
    rows = benchmark_tables.decode_speeds_table(single, 100.0, rl).to_dict(orient="records")
    assert [(r["tok/s"], r["÷ in-process"]) for r in rows] == [(100.0, 1.0), (90.0, 0.9), (80.0, 0.8), (400.0, 4.0),
                                                               (150.0, 1.5)]
    unmeasured = benchmark_tables.decode_speeds_table(None, None, rl).to_dict(orient="records")
    assert [r["÷ in-process"] for r in unmeasured] == [None] * 5 and unmeasured[3]["tok/s"] == 400.0
    assert benchmark_run.single_stream([]) is None and benchmark_run.single_stream([single, {}]) is single


def test_notebook_06_calls_its_steps_on_its_page(tmp_path):
    """What notebook 06 calls, named on its page: the profile with a cell's values, and a server you run that does
    not answer fails before anything starts (lab.diagnose.endpoint_diagnose says why; no sweep is kept)."""
    import yaml

    from lab.core import profiles, session
    from lab.core.paths import PARAMS
    from lab.diagnose import endpoint_diagnose
    from lab.serving import serve

    cpu = profiles.load("cpu-default")
    assert benchmark.profile_with(cpu, bench_prompt_tokens=96).bench_prompt_tokens == 96 != cpu.bench_prompt_tokens
    assert benchmark.profile_with(cpu, bench_prompt_tokens=cpu.bench_prompt_tokens) is cpu
    mine = tmp_path / "ep-unit.yaml"
    mine.write_text(yaml.safe_dump({**yaml.safe_load((PARAMS / "endpoint-example.yaml").read_text()), "name": "ep-unit",
                                    "endpoint_url": f"http://127.0.0.1:{serve.free_port()}/v1"}))
    steps = benchmark.steps(session.Session(profiles.load(mine), mine, tmp_path / "run"))
    with pytest.raises(endpoint_diagnose.EndpointUnreachable, match="nothing usable answers"):
        benchmark.serve_and_sweep(steps, steps.s.profile)
    assert steps.served is None and benchmark.in_process_tok_s(None) is None


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
