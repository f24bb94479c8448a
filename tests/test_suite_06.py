"""Notebooks tier: notebook 06 (benchmarking) in the session's one `lab run` on cpu-default (conftest.cpu_default_run);
assertions on its record."""
import statistics
from pathlib import Path

import pytest
from conftest import CPU_DEFAULT_PLAN, notebook_record

pytestmark = pytest.mark.notebooks
ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TOKENS = CPU_DEFAULT_PLAN["bench_output_tokens"]


@pytest.fixture(scope="module")
def record(cpu_default_run) -> dict:
    return notebook_record(cpu_default_run, "06_benchmarking", "06_benchmark")


def test_sweep_ran_on_the_real_server(record):
    s = record["summary"]
    assert s["benchmark_skipped"] is None and s["llama_bench_skipped"] is None
    assert [x["concurrency"] for x in record["sweep"]] == [1, 2, 4]
    assert all(x["successes"] > 0 and x["output_throughput"] > 0 for x in record["sweep"])
    assert record["server"]["stop"]["left_running"] == []
    for run in record["runs"]:
        done = [r for r in run["results"] if r["success"]]
        assert done and all(r["output_tokens"] == OUTPUT_TOKENS for r in done)  # from usage; ignore_eos keeps the length
        assert all(100 <= r["prompt_tokens"] <= 160 for r in done)     # ≈ 128 tokens, sized with /tokenize
        assert all(len(r["chunk_times_s"]) >= 1 for r in done)


def test_in_process_ratio_and_roofline_are_recorded(record):
    s = record["summary"]
    tg = record["llama_bench"]["tg"]
    assert tg["test"].startswith(f"tg{OUTPUT_TOKENS}@d") and len(tg["samples_tok_s"]) == 3
    assert s["llama_bench_tg_tok_s"] == tg["tok_s"] == statistics.median(tg["samples_tok_s"]) > 0  # the median
    assert s["served_over_in_process"] == pytest.approx(s["served_single_stream_decode_tok_s"] / tg["tok_s"])
    assert s["decode_ceiling_tok_s"] is not None and s["served_single_stream_decode_tok_s"] < s["decode_ceiling_tok_s"]
    assert record["roofline"]["bandwidth_kind"] == "copy"
    assert any(c["title"].startswith("Throughput and latency by concurrency") for c in record["charts"])


def test_client_capacity_and_claims(record):
    cap = record["client_capacity"]
    assert cap["flat_out"]["successes"] == 64 and cap["flat_out"]["tok_per_client_cpu_s"] > 0
    verdicts = {c["id"]: c["verdict"] for c in record["claims"]}
    assert verdicts["s0-vllm-single-stream-280"] == "impossible by physics"
    assert verdicts["s1-llamacpp-45-55"] == "not testable here"  # a V100 claim on a CPU box
    assert {t["title"] for t in record["tables"]} >= {"Sweep by concurrency", "Claims ledger", "Client capacity"}
