"""Real CUDA-run output replayed through the lab's own parsers (CI has no GPU, so this is how GPU-shaped data is tested).

Fixtures: tests/data/cuda_logs/ (each file's origin in SOURCES.yaml). h200_*: excerpts of the lab's own H200 runs
(outputs/h200-x1/...), lines kept verbatim and in order. published_*: two-GPU llama.cpp logs pasted in public GitHub
issues. Every expected number below is copied from the fixture's own lines.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core import profiles
from lab.diagnose import troubleshoot as ts
from lab.measure import gpumon
from lab.measure import llama_batched_bench
from lab.model import llama_bench
from lab.serving import engine_logs

LOGS = Path(__file__).resolve().parents[1] / "data" / "cuda_logs"


def _read(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def _parsed(name: str) -> dict:
    return engine_logs.parse_llama_log(_read(name))


def test_every_fixture_is_small_and_has_a_source():
    import yaml

    sources = yaml.safe_load(_read("SOURCES.yaml"))
    files = sorted(p.name for p in LOGS.iterdir() if p.name != "SOURCES.yaml")
    assert sorted(sources) == files
    for name in files:
        assert (LOGS / name).stat().st_size < 30 * 1024, name
        assert sources[name]["source"] and sources[name]["what"], name


# ---------------------------------------------------------------- one device: the lab's H200 runs
def test_h200_serve_one_device_buffers():
    r = _parsed("h200_llama_server_27b_q4k_np16.log")
    assert r["offloaded"] == {"layers": 66, "of": 66}
    assert r["model_buffers_mib"] == {"CPU_Mapped": 682.03, "CUDA0": 13754.79}
    assert r["kv_buffers_mib"] == {"CUDA0": 16384.0}
    assert r["rs_buffers_mib"] == {"CUDA0": 2394.0}
    assert r["compute_buffers_mib"] == {"CUDA0": 187.77, "CUDA_Host": 36.02}
    kv, rs = r["kv_caches"]
    assert (kv["cache"], kv["buffer"], kv["size_mib"], kv["cells"], kv["layers"], kv["streams"]) == \
        ("kv", "CUDA0", "16384.00", 16384, 16, 16)
    assert (rs["cache"], rs["buffer"], rs["size_mib"], rs["layers"], rs["rs_seq"]) == ("recurrent", "CUDA0", "2394.00", 64, 0)
    assert r["slots"] == {"n_slots": 16, "n_ctx_slot": 16384, "kv_unified": False}
    assert (r["context"]["n_ctx"], r["context"]["n_ctx_seq"]) == (262144, 16384)
    assert r["model"]["file_size_mib"] == pytest.approx(14.32 * 1024) and r["model"]["params"] == 27_320_000_000
    assert r["hparams"]["n_layer"] == 64 and r["flash_attention"] is True
    assert r["threads"] == {"n_threads": 8, "n_threads_batch": 8, "cpus": 16}
    assert r["errors"] == [] and r["warnings"] == []
    rows = {row["what"]: row["value"] for row in engine_logs.reported_rows(r)}
    assert rows["KV buffer on CUDA0"] == "16384.00 MiB" and rows["model buffer on CUDA0"] == "13754.79 MiB"


def test_h200_parsed_buffers_add_up_to_llama_cpps_own_breakdown():
    # llama.cpp's exit table, "| - CUDA0 (H200) | total = free + (self = model + context + compute) + unaccounted |",
    # counts whole MiB: the parsed per-buffer lines must sum to it (context = KV + recurrent state)
    import re

    r = _parsed("h200_llama_server_27b_q4k_np16.log")
    line = [ln for ln in _read("h200_llama_server_27b_q4k_np16.log").splitlines() if "- CUDA0 (H200)" in ln][-1]
    self_, model, context, compute = map(int, re.search(r"\((\d+) = +(\d+) \+ +(\d+) \+ +(\d+)\)", line).groups())
    assert (self_, model, context, compute) == (32720, 13754, 18778, 187)
    assert int(r["model_buffers_mib"]["CUDA0"]) == model
    assert int(r["kv_buffers_mib"]["CUDA0"] + r["rs_buffers_mib"]["CUDA0"]) == context
    assert int(r["compute_buffers_mib"]["CUDA0"]) == compute


def test_h200_serve_request_timings():
    tasks = engine_logs.request_timings(_read("h200_llama_server_27b_q4k_np16.log"))
    assert [(t["task"], t["slot"], t["prompt_tokens"], t["output_tokens"]) for t in tasks] == \
        [(0, 15, 1, 1), (2, 14, 5, 16), (19, 13, 24, 16)]
    assert tasks[1]["decode_ms"] == 206.91 and tasks[1]["tpot_ms"] == pytest.approx(206.91 / 15)
    assert tasks[0]["tpot_ms"] is None  # one output token: no decode step to divide by


def test_h200_full_offload_passes_the_offload_check():
    c = gpumon.offload_check(_parsed("h200_llama_server_27b_q4k_np16.log"), profiles.load("h200-x1"))
    assert c["status"] == "pass" and c["observed"] == "66/66 layers"


def test_h200_healthy_log_raises_no_knowledge_base_problem():
    found = ts.match_text(_read("h200_llama_server_27b_q4k_np16.log"), {"profile_gpu_count": 1})
    assert [f.entry_id for f in found if f.severity in ("error", "warn")] == []


def test_h200_mtp_draft_context():
    text = _read("h200_llama_server_27b_mtp3.log")
    r = engine_logs.parse_llama_log(text)
    # the target's KV (256 MiB) and the MTP draft context's own KV (16 MiB, 1 layer) both sit on CUDA0
    assert [(c["cache"], c["size_mib"], c["layers"], c["buffer"]) for c in r["kv_caches"]] == \
        [("kv", "256.00", 16, "CUDA0"), ("recurrent", "598.50", 64, "CUDA0"), ("mtp", "16.00", 1, "CUDA0")]
    assert r["kv_buffers_mib"] == {"CUDA0": 272.0}  # the device's KV memory: 256 + 16
    assert r["rs_buffers_mib"] == {"CUDA0": 598.5}
    assert r["model_buffers_mib"] == {"CPU_Mapped": 682.03, "CUDA0": 13982.7}
    assert r["slots"] == {"n_slots": 1, "n_ctx_slot": 4096, "kv_unified": False}
    # llama-server's own clock for the two 128-token requests, speculating (draft-mtp, n-max 3)
    tasks = engine_logs.request_timings(text)
    assert [(t["task"], t["prompt_tokens"], t["output_tokens"], t["decode_ms"]) for t in tasks[1:]] == \
        [(2, 506, 128, 2950.03), (131, 506, 128, 2818.70)]
    assert tasks[1]["tpot_ms"] == pytest.approx(2950.03 / 127)
    assert gpumon.offload_check(r, profiles.load("h200-x1"))["status"] == "pass"


def test_h200_ngl0_warns_and_reads_the_real_load_not_the_fit_pass():
    r = _parsed("h200_llama_server_ngl0.log")
    # the log loads twice (llama.cpp's fitting pass, then for real); the first has "CUDA_Host ... 0.00 MiB"
    assert r["offloaded"] == {"layers": 0, "of": 3}
    assert r["model_buffers_mib"] == {"CPU_Mapped": 16.19}
    assert r["kv_buffers_mib"] == {"CPU": 1.0}
    assert r["compute_buffers_mib"] == {"CUDA0": 1.78, "CUDA_Host": 2.76}
    assert [(c["size_mib"], c["buffer"]) for c in r["kv_caches"]] == [("1.00", "CPU")]
    c = gpumon.offload_check(r, profiles.load("h200-x1"))
    assert c["status"] == "warn" and c["observed"] == "0/3 layers; host KV 1 MiB"
    assert "only 0 of 3 layers offloaded, 3 asked" in c["fix"] and "CPU 1 MiB" in c["fix"]
    found = ts.match_text(_read("h200_llama_server_ngl0.log"), {"profile_gpu_count": 1})
    assert "llamacpp-no-gpu-offload" in [f.entry_id for f in found]


def test_h200_llama_bench_json():
    rows = llama_bench.parse_json(_read("h200_llama_bench_27b_verify_batches.log"))
    assert [llama_bench.test_name(r) for r in rows] == ["pp1", "pp2", "pp3", "pp4", "pp5"]
    assert {(r["gpu_info"], r["backends"], r["split_mode"], r["model_size"]) for r in rows} == \
        {("NVIDIA H200", "CUDA", "layer", 15377076224)}
    s = llama_bench.stats(rows[0])
    # the median ignores the first, cold repetition (26.4 tok/s); llama-bench's mean does not
    assert (s["tok_s"], s["tok_s_mean"], s["reps"]) == (88.7303, 76.12305, 5)
    assert llama_bench.stats(rows[4])["tok_s"] == 275.548


def test_h200_llama_batched_bench_jsonl():
    rows = llama_batched_bench.parse_jsonl(_read("h200_llama_batched_bench_27b.log"))
    assert [r["pl"] for r in rows] == [1, 4, 8, 16]
    by = llama_batched_bench.summarise(rows, [1, 4, 8, 16])
    assert by[1]["speed_tg"] == 90.442039 and by[16]["speed_tg"] == 518.939148
    assert by[16]["output_tok_s"] == pytest.approx(16 * 256 / 10.932219)


# ---------------------------------------------------------------- two devices: published logs
def test_two_gpu_layer_split_per_device():
    r = _parsed("published_llama_server_sm_layer_2080ti_p100.log")
    assert r["model_buffers_mib"] == {"CUDA0": 8500.51, "CUDA1": 6845.15}
    assert r["kv_buffers_mib"] == {"CUDA0": 4608.0, "CUDA1": 3584.0}
    assert r["rs_buffers_mib"] == {"CUDA0": 90.4, "CUDA1": 59.23}
    assert r["compute_buffers_mib"] == {"CUDA0": 668.03, "CUDA1": 523.54}
    rows = {row["what"]: row["value"] for row in engine_logs.reported_rows(r)}
    assert rows["KV buffer on CUDA1"] == "3584.00 MiB" and rows["recurrent-state buffer on CUDA1"] == "59.23 MiB"
    # the pasted excerpt has no "offloaded N/M" line: the check will not pass on buffers alone
    c = gpumon.offload_check(r, profiles.load("v100-32g-x2-nvlink"))
    assert c["status"] == "warn" and "no 'offloaded N/M layers' line" in c["observed"]


def test_two_gpu_full_offload_passes():
    r = _parsed("published_llama_server_sm_layer_2x3090.log")
    assert r["offloaded"] == {"layers": 81, "of": 81}
    assert r["model_buffers_mib"] == {"CPU_Mapped": 563.62, "CUDA0": 20038.81, "CUDA1": 19940.67}
    assert gpumon.offload_check(r, profiles.load("v100-32g-x2-nvlink"))["status"] == "pass"


def test_two_gpu_partial_offload_warns():
    r = _parsed("published_koboldcpp_partial_offload_2gpu.log")
    assert r["offloaded"] == {"layers": 44, "of": 49}
    assert r["model_buffers_mib"] == {"CPU": 809.29, "CUDA0": 31014.14}
    c = gpumon.offload_check(r, profiles.load("v100-32g-x2-nvlink"))
    assert c["status"] == "warn" and "only 44 of 49 layers offloaded, 49 asked" in c["fix"]


def test_two_gpu_tensor_split_reports_one_meta_device():
    # -sm tensor: llama.cpp wraps both GPUs in one "Meta()" device and prints one figure for it (a single
    # device's share, not the pair's total); the log names no CUDA1, so neither can the parser
    r = _parsed("published_llama_server_sm_tensor_cuda_rocm.log")
    assert r["offloaded"] == {"layers": 66, "of": 66}
    assert r["model_buffers_mib"] == {"CPU": 1288.28, "Meta()": 12952.69}
    assert gpumon.offload_check(r, profiles.load("h200-x2"))["status"] == "pass"
    rs = _parsed("published_llama_server_sm_tensor_recurrent.log")
    assert rs["rs_buffers_mib"] == {"Meta()": 124.69}
    assert [(c["cache"], c["size_mib"], c["layers"], c["seqs"], c["buffer"]) for c in rs["kv_caches"]] == \
        [("recurrent", "299.25", 64, 2, "Meta()")]
