"""The lab's client against llama-benchy, guidellm and aiperf (lab.experiments.peer_clients, set up by lab/setup/peers.py).

Unit tier: their exports, captured from real runs on the embedded SmolLM2 (tests/data/peer_*), parsed into the lab's
metric names; the comparison's verdicts and spread over repetitions; the command lines carry the load. Tools tier:
the whole comparison on a real CPU llama-server with llama-benchy and guidellm: what does not depend on the machine's
load is asserted (every request accounted for, exactly the output tokens asked for), the timing ratios are recorded
and printed, each within the tolerance or carrying the definition that explains it, else a warning (a shared CPU).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lab.experiments import peer_clients, peer_verdicts
from lab.measure import peer_tools
from lab.measure.peer_bench import PeerLoad


DATA = Path(__file__).resolve().parents[1] / "data"


def _aiperf():
    return json.loads((DATA / "peer_aiperf_0.13.0_profile_export_aiperf.json").read_text())


def _benchy():
    return json.loads((DATA / "peer_llama_benchy_0.4.0_c2.json").read_text())


def _guidellm():
    return json.loads((DATA / "peer_guidellm_0.8.0_c2.json").read_text())


def test_guidellm_export_parses_into_the_lab_names():
    # the capture: 16 requests × 64 output tokens at 2 streams, /v1/completions, on a loaded 2-core machine
    raw = _guidellm()
    m = peer_tools.parse_guidellm(raw)
    met = raw["benchmarks"][0]["metrics"]
    assert m["successes"] == 16 and m["failures"] == 0
    assert m["output_tokens_mean"] == 64 and m["prompt_tokens_mean"] == 128  # server-counted, exactly as asked
    assert m["ttft_ms"]["mean"] == met["time_to_first_token_ms"]["successful"]["mean"]
    # its ITL ((last − first token chunk) ÷ (tokens − 1)) is compared with the lab's ITL and TPOT; its TPOT is not
    assert m["itl_ms"]["mean"] == m["tpot_ms"]["mean"] == met["inter_token_latency_ms"]["successful"]["mean"]
    assert m["tpot_incl_first_ms"]["mean"] == met["time_per_output_token_ms"]["successful"]["mean"]
    # its throughputs are count ÷ benchmark duration, as the lab's (request_stats / the export's duration)
    assert m["request_throughput"] == pytest.approx(16 / m["duration_s"], rel=1e-6)
    assert m["output_throughput"] == pytest.approx(16 * 64 / m["duration_s"], rel=1e-6)
    assert m["e2el_ms"]["mean"] == pytest.approx(1000 * met["request_latency"]["successful"]["mean"])


def test_guidellm_scenario_carries_the_load_and_slimming_keeps_what_is_parsed(tmp_path):
    load = PeerLoad(num_prompts=16, concurrency=2, input_tokens=128, output_tokens=64)
    sc = peer_tools.guidellm_scenario("http://127.0.0.1:9", "m", "/tok", load, tmp_path / "b.json", "KEY")["spec"]
    assert sc["profile"] == {"kind": "concurrent", "streams": [2]}
    assert sc["constraints"] == [{"kind": "max_requests", "count": 16}]
    assert sc["data"][0]["prompt_tokens"] == 128 and sc["data"][0]["output_tokens"] == 64
    assert sc["backend"]["request_format"] == "/v1/completions" and sc["backend"]["extras"]["body"]["temperature"] == 0
    assert sc["tokenizer"]["model"] == "/tok" and sc["backend"]["api_key"] == "KEY"
    slim = peer_tools.slim_guidellm(_guidellm())
    assert peer_tools.parse_guidellm(slim) == peer_tools.parse_guidellm(_guidellm())


def test_ratio_spread_and_headline_over_repetitions():
    def result(rep, ttft_lab, itl_theirs):
        ours = {"ttft_ms": {"mean": ttft_lab, "p50": 100.0}, "tpot_ms": {"mean": 12.0, "p50": 12.0},
                "itl_ms": {"mean": 10.0, "p50": 10.0}, "e2el_ms": {"mean": 900.0}, "output_throughput": 80.0,
                "request_throughput": 1.0}
        theirs = {"ttft_ms": {"mean": 100.0, "p50": 100.0}, "tpot_ms": {"mean": itl_theirs, "p50": itl_theirs},
                  "itl_ms": {"mean": itl_theirs, "p50": None}, "e2el_ms": {"mean": 900.0, "p50": None},
                  "output_throughput": 80.0, "request_throughput": 1.0}
        return {"repetition": rep, "tool": "guidellm", "concurrency": 2,
                "rows": peer_verdicts.compare("guidellm", ours, theirs)}

    record = {"tools": ["guidellm"], "levels": [2], "results": [result(1, 102.0, 10.0), result(2, 98.0, 10.0),
                                                                 result(3, 100.0, 10.0)]}
    ratios = {r["metric"]: r for r in peer_verdicts.ratio_spread(record)}
    assert ratios["ttft_ms mean"]["samples"] == [1.02, 0.98, 1.0] and ratios["ttft_ms mean"]["mean"] == 1.0
    assert (ratios["ttft_ms mean"]["min"], ratios["ttft_ms mean"]["max"]) == (0.98, 1.02)
    # lab TPOT 12 vs guidellm's ITL 10: beyond 5 %, explained by where the window ends ([DONE])
    assert ratios["tpot_ms mean"]["within ±5 %"] is False and "[DONE]" in ratios["tpot_ms mean"]["why they differ"]
    assert ratios["itl_ms p50"]["within ±5 %"] is None  # guidellm gives no per-chunk p50
    record["ratios"] = list(ratios.values())
    line = peer_clients.headline(record)
    assert line.startswith("lab ÷ theirs: guidellm c=2: TTFT 1.000 [0.980-1.020], ITL 1.000 [1.000-1.000]")
    assert "req/s 1.000" in line


def test_clients_run_as_modules_where_set_up_says_so(tmp_path, monkeypatch):
    # the H200 device: wheels installed with pip --target, no venv (lab/device/run_h200.sh MODE=peers)
    info = tmp_path / "lab-peers.json"
    info.write_text(json.dumps({"python": "/usr/bin/python3", "modules": True, "pythonpath": "/tmp/site",
                                "tokenizers": {"served": "/tok/served", "smollm2": "/tok/smol"}}))
    monkeypatch.setenv("LAB_PEERS_INFO", str(info))
    assert peer_tools.tool_argv("guidellm") == ["/usr/bin/python3", "-m", "guidellm"]
    assert peer_tools.guidellm_command(Path("/s.json"))[:4] == ["/usr/bin/python3", "-m", "guidellm", "run"]
    assert peer_tools.tokenizer_path(peer_tools.peers_info()) == "/tok/served"  # the served model's first


def test_benchy_failed_runs_are_counted_by_reason(tmp_path):
    log = tmp_path / "llama_benchy.log"
    log.write_text("  Run 12/16 (batch size 1)...\nError during run: Server disconnected\n  Run 13/16 (batch size 1)...\n"
                   "Error during run: Server disconnected\n")
    assert peer_tools.benchy_errors(log) == {"Server disconnected": 2}


def test_aiperf_export_parses_into_the_lab_names():
    m = peer_tools.parse_aiperf(_aiperf())
    raw = _aiperf()
    assert m["ttft_ms"]["mean"] == raw["time_to_first_token"]["avg"]
    assert m["ttft_ms"]["p50"] == raw["time_to_first_token"]["p50"]
    # aiperf's "ITL" is (latency − TTFT) ÷ (tokens − 1): the lab's TPOT; its ICL is the lab's per-chunk ITL
    assert m["tpot_ms"]["mean"] == raw["inter_token_latency"]["avg"]
    assert m["itl_ms"]["mean"] == raw["inter_chunk_latency"]["avg"]
    assert m["output_throughput"] == raw["output_token_throughput"]["avg"]
    assert m["request_throughput"] == raw["request_throughput"]["avg"]
    # the capture: 4 requests × 16 output tokens at 2 streams (small: the shared CI box was loaded when it was taken)
    assert m["output_tokens_mean"] == 16  # exactly the requested output (ignore_eos), counted by the server
    assert m["successes"] == 4 and m["prompt_tokens_mean"] == _aiperf()["input_sequence_length"]["avg"]


def test_llama_benchy_report_parses_tpot_from_its_per_request_rates():
    raw = _benchy()
    m = peer_tools.parse_benchy(raw, 2)
    run = next(b for b in raw["benchmarks"] if b["concurrency"] == 2)
    rates = run["tg_req_throughput"]["values"]
    assert len(rates) == 4 and m["successes"] == 4
    assert m["tpot_ms"]["mean"] == pytest.approx(sum(1000 / r for r in rates) / len(rates))
    assert m["ttft_ms"]["mean"] == pytest.approx(run["e2e_ttft"]["mean"])
    assert m["request_throughput"] is None and m["itl_ms"]["p50"] is None  # it reports neither
    # its per-request (last − first content chunk) ÷ tokens after the first is the lab's per-chunk ITL mean too
    assert m["itl_ms"]["mean"] == m["tpot_ms"]["mean"]


def test_compare_judges_within_tolerance_and_explains_known_definition_differences():
    ours = {"ttft_ms": {"mean": 104.0, "p50": 90.0}, "tpot_ms": {"mean": 12.0, "p50": 12.0},
            "itl_ms": {"mean": 12.0, "p50": 12.0}, "e2el_ms": {"mean": 900.0}, "output_throughput": 80.0,
            "request_throughput": 1.0}
    theirs = {"ttft_ms": {"mean": 100.0, "p50": 100.0}, "tpot_ms": {"mean": 10.0, "p50": 12.0},
              "itl_ms": {"mean": None, "p50": None}, "e2el_ms": {"mean": None}, "output_throughput": 160.0,
              "request_throughput": None}
    rows = {r["metric"]: r for r in peer_verdicts.compare("llama-benchy", ours, theirs)}
    assert rows["ttft_ms mean"]["lab ÷ theirs"] == 1.04 and rows["ttft_ms mean"]["within ±5 %"] is True
    # its prompt counts the chat template, the lab's does not (runner.py:111-113): explained
    assert rows["ttft_ms p50"]["within ±5 %"] is False and rows["ttft_ms p50"]["why they differ"] == "as TTFT mean"
    same = {r["metric"]: r for r in peer_verdicts.compare("guidellm", ours, theirs)}
    assert same["ttft_ms p50"]["within ±5 %"] is False and same["ttft_ms p50"]["why they differ"] is None  # unexplained
    assert rows["tpot_ms mean"]["within ±5 %"] is False and "[DONE]" in rows["tpot_ms mean"]["why they differ"]
    assert rows["output_throughput"]["lab ÷ theirs"] == 0.5 and "decode tokens" in rows["output_throughput"]["why they differ"]
    assert rows["request_throughput"]["within ±5 %"] is None
    assert rows["request_throughput"]["why they differ"] == "llama-benchy does not report it"


def test_itl_ratio_is_explained_by_tokens_per_chunk_only_when_the_counts_say_so():
    """The H200 run's one-stream figures (outputs/peer_clients-h200/20261202T053002Z_54fe515): 16 requests of 128
    tokens in 1,245 chunk gaps, lab ÷ llama-benchy ITL 1.654: 1.63 tokens a chunk explains it; 1.43 it does not."""
    ours = {"itl_ms": {"mean": 19.2, "n": 1245}, "successes": 16, "output_tokens_mean": 128}
    why = peer_verdicts.itl_per_chunk(ours, 1.654)
    assert why and "1.63 tokens" in why and "2032 tokens in 1245 gaps" in why and "= 1.013" in why
    assert peer_verdicts.itl_per_chunk(ours, 1.43) is None
    assert peer_verdicts.itl_per_chunk({"itl_ms": {"n": 0}, "successes": 16, "output_tokens_mean": 128}, 1.6) is None
    rows = peer_verdicts.compare("guidellm", ours, {"itl_ms": {"mean": 19.2 / 1.654}})
    itl = next(r for r in rows if r["metric"] == "itl_ms mean")
    assert itl["within ±5 %"] is False and "per stream chunk" in itl["why they differ"]


def test_command_lines_carry_the_same_load():
    load = PeerLoad(num_prompts=16, concurrency=2, input_tokens=128, output_tokens=64)
    a = peer_tools.aiperf_command("http://127.0.0.1:9", "m", "/tok", load, Path("/out"))
    for flag, value in [("--concurrency", "2"), ("--request-count", "16"), ("--isl", "128"), ("--osl", "64"),
                        ("--warmup-request-count", "1"), ("--endpoint-type", "completions")]:
        assert a[a.index(flag) + 1] == value
    assert "ignore_eos:true" in a and "--use-server-token-count" in a and "--streaming" in a
    b = peer_tools.benchy_command("http://127.0.0.1:9", "m", "/tok", load, Path("/out/r.json"))
    for flag, value in [("--concurrency", "2"), ("--runs", "8"), ("--pp", "128"), ("--tg", "64"),
                        ("--base-url", "http://127.0.0.1:9/v1"), ("--latency-mode", "none")]:
        assert b[b.index(flag) + 1] == value
    assert "--exact-tg" in b


def test_benchy_book_is_seeded_where_llama_benchy_looks(tmp_path):
    # llama_benchy/corpus.py: ~/.cache/llama-benchy/<md5 of the book URL>.txt is read instead of downloading
    path = peer_tools.seed_benchy_book(tmp_path)
    assert path == tmp_path / ".cache" / "llama-benchy" / f"{hashlib.md5(b'lab:heldout').hexdigest()}.txt"
    assert len(path.read_text()) > 1000


def test_missing_venv_is_a_skip_with_the_reason_set_up_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(peer_tools, "PEERS_VENV", tmp_path / ".venv-peers")
    why = tmp_path / ".venv-peers.missing.json"
    monkeypatch.setattr(peer_tools, "WHY_MISSING", why)
    assert "is missing" in peer_tools.skip_reason() and "lab.setup --peers" in peer_tools.skip_reason()
    why.write_text(json.dumps({"why": "exit 2: Failed to fetch: https://pypi.org/simple/aiperf/"}))
    record = peer_clients.run(None, tmp_path)
    assert "pypi.org" in record["skipped"] and record["results"] == []
    assert peer_clients.checks(record)[0].status == "skip"
    assert peer_clients.text(record).startswith("peer-client check not run: ")
