"""Notebooks tier: notebook 06 (benchmarking) in the session's one `lab run` on cpu-default (conftest.cpu_default_run);
assertions on its record."""
import statistics

import pytest
from conftest import CPU_DEFAULT_PLAN, failed_checks, notebook_record, speed_cut_levels

pytestmark = pytest.mark.notebooks
OUTPUT_TOKENS = CPU_DEFAULT_PLAN["bench_output_tokens"]


@pytest.fixture(scope="module")
def record(cpu_default_run) -> dict:
    return notebook_record(cpu_default_run, "06_benchmarking", "06_benchmark")


def test_sweep_ran_on_the_real_server(record):
    s = record["summary"]
    assert s["benchmark_skipped"] is None and s["llama_bench_skipped"] is None
    assert [x["concurrency"] for x in record["sweep"]] == [1, 2, 4]
    cut = speed_cut_levels(record)
    assert all(x["successes"] > 0 and x["output_throughput"] > 0 for x in record["sweep"] if x["concurrency"] not in cut)
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
    assert s["decode_ceiling_tok_s"] is not None
    if s["served_single_stream_decode_tok_s"] is None:  # one stream served nothing in its budget: no ratio, said so
        assert 1 in speed_cut_levels(record) and s["served_over_in_process"] is None
    else:
        assert s["served_over_in_process"] == pytest.approx(s["served_single_stream_decode_tok_s"] / tg["tok_s"])
        assert s["served_single_stream_decode_tok_s"] < s["decode_ceiling_tok_s"]
    assert record["roofline"]["bandwidth_kind"] == "copy"
    assert any(c["title"].startswith("Throughput and latency by concurrency") for c in record["charts"])


def test_client_capacity_and_claims(record):
    cap = record["client_capacity"]
    assert cap["flat_out"]["successes"] == 64 and cap["flat_out"]["tok_per_client_cpu_s"] > 0
    verdicts = {c["id"]: c["verdict"] for c in record["claims"]}
    assert verdicts["s0-vllm-single-stream-280"] == "impossible by physics"  # 2.39x the 117 tok/s ceiling: beyond MTP
    assert verdicts["s0-llamacpp-one-v100-180"] == "impossible by physics"  # beyond even MTP's bound
    # a V100 claim on a CPU box: not our hardware, so the published V100 rows judge it, against the route the lab
    # recommends for one V100 (draft-mtp n-max 2: 48.09 tok/s published, within 45-55; plain 33.6 is not)
    assert verdicts["s1-llamacpp-45-55"] == "consistent"
    assert {t["title"] for t in record["tables"]} >= {"Sweep by concurrency", "Claims ledger", "Client capacity"}


def test_each_level_is_warmed_up_then_measured_three_times(record):
    """Warm-up rounds at the level's concurrency until steady (≤ 3 rounds), then 3 repetitions sharing
    the level's requests, each repetition's figures and their spread kept; the validity rule holds for the level."""
    for level, run in zip(record["sweep"], record["runs"]):
        n = level["concurrency"]
        budget = CPU_DEFAULT_PLAN["bench_requests"]
        shares = [rep["max_requests"] for rep in run["repetitions"]]
        assert sum(shares) == budget and max(shares) - min(shares) <= 1  # the level's budget, shared (500 = 167+167+166)
        assert all(1 <= rep["requests"] <= rep["max_requests"] for rep in run["repetitions"])
        assert sorted({r["repetition"] for r in run["results"]}) == [1, 2, 3]
        assert len(level["repetitions"]) == 3
        if n in speed_cut_levels(record):
            continue  # the machine's speed (conftest.SPEED_DEPENDENT_CHECKS), said in the record; not this test's subject
        rounds = level["warmup"]["rounds"]
        assert 2 <= len(rounds) <= 3 and all(x["requests"] == n and x["ok"] == n for x in rounds)
        assert level["spread"]["output_throughput"]["n"] == 3
        sp = level["spread"]["output_throughput"]
        assert sp["min"] <= sp["mean"] <= sp["max"] and sp["sd"] is not None
        assert level["duration_s"] == pytest.approx(sum(rep["duration_s"] for rep in run["repetitions"]))
        assert level["validity"]["valid"] and level["duration_s"] >= 4.5  # the 3 s rule with margin
        assert level["decode_tok_s_summed"] == pytest.approx(n * level["stream_decode_tok_s"])


def test_batched_bench_yardstick_per_level(record):
    """llama-batched-bench at the sweep's levels and lengths; served ÷ in-process per level with its limit."""
    s, bb = record["summary"], record["batched_bench"]
    assert s["batched_bench_skipped"] is None and sorted(bb["by_parallel"]) == ["1", "2", "4"]
    assert all(r["tg"] == OUTPUT_TOKENS and r["pl"] in (1, 2, 4) for r in bb["rows"])
    assert sorted(s["served_over_batched_decode"]) == ["1", "2", "4"]
    cut = speed_cut_levels(record)
    assert all(v > 0 if int(n) not in cut else v is None or v > 0 for n, v in s["served_over_batched_decode"].items())
    rows = record["yardstick"]
    assert rows[0]["yardstick"].startswith("llama-bench tg")
    assert rows[0]["served_over_in_process"] == (pytest.approx(s["served_over_in_process"])
                                                 if s["served_over_in_process"] is not None else None)
    assert all(r["limited_by"] and not r["limited_by"].startswith("not measured") for r in rows)


def test_speculative_record_has_the_verification_batches(cpu_default_run):
    spec = notebook_record(cpu_default_run, "06_benchmarking", "06_speculative")
    if "speculative decoding: baseline measured" in failed_checks(cpu_default_run):
        # the machine's speed (conftest.SPEED_DEPENDENT_CHECKS): the baseline did not serve inside its 1 s test budget
        print("speculative baseline not measured here:", spec["summary"].get("baseline_decode_tok_s"))
        return
    assert sorted(spec["summary"]["verification_batch_tok_s"]) == ["1", "2", "3", "4", "5"]
    assert any(t["title"].startswith("Verification batches") for t in spec["tables"])
