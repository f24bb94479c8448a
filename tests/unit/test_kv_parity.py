"""Parity with the real engine: llama-server's reported KV buffers equal lab.predict.kvcache's prediction exactly."""
import dataclasses

import pytest

from lab.model import models
from lab.predict import kvcache
from lab.measure import kvcache_verify as kv
from lab.serving import engine_logs


SAMPLE_LOG = """\
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
llama_kv_cache:        CPU KV buffer size =    67.50 MiB
llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells
llama_kv_cache:        CPU KV buffer size =    12.00 MiB
llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), K (f16):    6.00 MiB, V (f16):    6.00 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells
llama_kv_cache:        CPU KV buffer size =    15.00 MiB
llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), K (q8_0):    7.50 MiB, V (q4_0):    7.50 MiB
llama_memory_recurrent:        CPU RS buffer size =    18.70 MiB
llama_memory_recurrent: size =   18.70 MiB (     2 cells,   4 layers,  2 seqs  0 rs_seq), R (f32):    0.70 MiB, S (f32):   18.00 MiB, P (f32):    0.00 MiB
"""


def test_parser_skips_dry_run_and_names_caches():
    caches = engine_logs.parse_kv_lines(SAMPLE_LOG)
    assert [(c["cache"], c["cells"], c["size_mib"]) for c in caches] == [
        ("kv", 1024, "67.50"), ("global", 4096, "12.00"), ("swa", 1024, "15.00"), ("recurrent", 2, "18.70")]
    assert (caches[2]["type_k"], caches[2]["type_v"], caches[2]["streams"]) == ("q8_0", "q4_0", 1)
    rec = caches[3]
    assert (rec["k_mib"], rec["v_mib"], rec["layers"], rec["seqs"], rec["rs_seq"], rec["type_k"]) == \
        ("0.70", "18.00", 4, 2, 0, "f32")
    assert [c["buffer"] for c in caches] == ["CPU"] * 4  # the dry run's buffer line is not carried over


def test_parser_names_the_gpu_buffers():
    """On a GPU the same lines name the device (llama.cpp prints ggml_backend_buffer_name: CUDA0, ...)."""
    log = """\
llama_kv_cache:      CUDA0 KV buffer size = 16384.00 MiB
llama_kv_cache: size = 16384.00 MiB (262144 cells,  16 layers, 16/16 seqs), K (f16): 8192.00 MiB, V (f16): 8192.00 MiB
llama_memory_recurrent:      CUDA0 RS buffer size =  2394.00 MiB
llama_memory_recurrent: size = 2394.00 MiB (    16 cells,  64 layers, 16 seqs  0 rs_seq), R (f32):   90.00 MiB, S (f32): 2304.00 MiB
"""
    caches = engine_logs.parse_kv_lines(log)
    assert [(c["cache"], c["buffer"], c["streams"]) for c in caches] == [("kv", "CUDA0", 16), ("recurrent", "CUDA0", 16)]


def test_gpu_profile_adds_its_own_server_configuration(tmp_path):
    from lab.core import profiles

    assert kv.gpu_layers(profiles.load("cpu-default")) is None and kv.profile_point(profiles.load("cpu-default")) is None
    h200 = profiles.load("h200-x1")
    assert kv.gpu_layers(h200) == 999
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    label, path, run = kv.profile_point(h200.model_copy(update={"model_file": str(model)}))
    assert (label, path, run.n_ctx, run.n_parallel, run.type_k) == (
        "profile: Qwen3.8-27B-Q4_K_M", model, 262144, 16, "f16")
    assert kv.profile_point(h200.model_copy(update={"model_file": str(tmp_path / "absent.gguf")})) is None


def test_qwen38_full_model_caches_as_llama_cpp_would_print_them():
    """The 64-layer Qwen3.8-27B at -c 65536: the KV cache covers the 16 full-attention layers only; the
    recurrent state is 149.62 MiB per slot (48 layers × (30,720 + 786,432) F32), whatever the KV type."""
    arch = models.stand_in("qwen3.8-27b")
    pred = kvcache.llama_cpp_kv_prediction(arch, 65536, 1, "f16")
    kv_cache, rec = pred["caches"]
    assert (kv_cache["cache"], kv_cache["layers"], kv_cache["size_bytes"], kv_cache["size_mib"]) == \
        ("kv", 16, 4 << 30, "4096.00")
    assert (rec["cache"], rec["cells"], rec["layers"], rec["state_layers"]) == ("recurrent", 1, 64, 48)
    assert (rec["k_bytes"], rec["v_bytes"]) == (48 * 30_720 * 4, 48 * 786_432 * 4)
    assert (rec["size_mib"], rec["k_mib"], rec["v_mib"]) == ("149.62", "5.62", "144.00")
    q8 = kvcache.llama_cpp_kv_prediction(arch, 65536, 4, "q8_0")["caches"]
    assert q8[0]["size_bytes"] == 16 * 2 * 65536 * (1024 // 32 * 34) and q8[1]["size_bytes"] == 4 * 156_893_184
    mtp = kvcache.llama_cpp_recurrent(arch, 1, n_rs_seq=3)  # MTP speculation keeps 3 more state rows per slot
    assert mtp["size_bytes"] == 4 * 156_893_184


# What the real llama-server (CPU build, llama-cpp-python 0.3.36's llama.cpp) printed on 2026-12-01 on this 2-core
# box for a 4-layer synthetic Qwen3.8-27B with its MTP layer (blk.4, qwen35.nextn_predict_layers = 1) and
# `-c 2048 -np 1 --spec-type draft-mtp --spec-draft-n-max 3` (buffer lines left out)
MTP_LOG = """llama_kv_cache: size =    8.00 MiB (  2048 cells,   1 layers,  1/1 seqs), K (f16):    4.00 MiB, V (f16):    4.00 MiB
llama_memory_recurrent: size =   37.41 MiB (     1 cells,   4 layers,  1 seqs  3 rs_seq), R (f32):    1.41 MiB, S (f32):   36.00 MiB, P (f32):    0.00 MiB
common_speculative_init_result: creating MTP draft context against the target model 'q38-4L-mtp.gguf'
llama_kv_cache: size =    8.00 MiB (  2048 cells,   1 layers,  1/1 seqs), K (f16):    4.00 MiB, V (f16):    4.00 MiB
"""


def test_draft_mtp_adds_state_rows_and_the_mtp_context_cache():
    """--spec-type draft-mtp --spec-draft-n-max 3: the target keeps 1 + 3 state rows per slot (common.h
    need_n_rs_seq) and the MTP context a KV cache of its one layer over the target's n_ctx; the main context's
    KV cache still covers the trunk's full-attention layers only."""
    arch = dataclasses.replace(models.stand_in("qwen3.8-27b"), n_layers=4, linear_layers=(0, 1, 2))
    assert arch.mtp_layers == 1  # model_configs.yaml: mtp_num_hidden_layers 1
    pred = kvcache.llama_cpp_kv_prediction(arch, 2048, 1, "f16", draft_mtp=3)
    assert [(c["cache"], c["layers"], c["cells"]) for c in pred["caches"]] == [
        ("kv", 1, 2048), ("recurrent", 4, 1), ("mtp", 1, 2048)]
    assert pred["caches"][1]["size_bytes"] == 4 * 3 * 3_268_608  # 3 Gated DeltaNet layers × 4 rows
    assert pred["caches"][2]["size_bytes"] == 2048 * 2 * 4 * 256 * 2  # cells × (K + V) × 4 KV heads × 256 × f16
    rows = kv.compare(kv.KvRun(kv.HYBRID_MODEL, 2048, draft_mtp=3), arch, engine_logs.parse_kv_lines(MTP_LOG))
    assert [(r["cache"], r["match"]) for r in rows] == [("kv", True), ("recurrent", True), ("mtp", True)]
    no_mtp = dataclasses.replace(arch, mtp_layers=0)
    with pytest.raises(kvcache.KvCacheError, match="no MTP layers"):
        kvcache.llama_cpp_kv_prediction(no_mtp, 2048, 1, draft_mtp=3)


# What the real llama-server (CPU build of llama-cpp-python 0.3.36's llama.cpp) printed on 2026-12-01 for the
# full 64-layer synthetic Qwen3.8-27B (`python -m lab synth --arch qwen3.8-27b` as it was before it wrote the MTP
# layer, i.e. `--mtp 0` today: 15,146,290,240 bytes, written
# in 135 s on this 2-core box) with `-c 1024 -np 1`; it reported "model type = 27B". Too big to re-run in CI.
FULL_MODEL_LOG = """\
llama_kv_cache: size =   64.00 MiB (  1024 cells,  16 layers,  1/1 seqs), K (f16):   32.00 MiB, V (f16):   32.00 MiB
llama_memory_recurrent: size =  149.62 MiB (     1 cells,  64 layers,  1 seqs  0 rs_seq), R (f32):    5.62 MiB, S (f32):  144.00 MiB, P (f32):    0.00 MiB
"""


def test_full_64_layer_file_as_llama_server_reported_it():
    rows = kv.compare(kv.KvRun("qwen3.8-27b", 1024), models.stand_in("qwen3.8-27b"), engine_logs.parse_kv_lines(FULL_MODEL_LOG))
    assert [(r["cache"], r["match"]) for r in rows] == [("kv", True), ("recurrent", True)]
