"""KV-cache arithmetic (pure): hand-computed cases for real configs, llama.cpp sizing rules, bad inputs."""
import dataclasses

import pytest

from lab.model import models
from lab.predict import kvcache
from lab.predict.kvcache import KvCacheError
from lab.model.models import ArchSpec

GIB = 1 << 30


@pytest.fixture(scope="module")
def qwen3_32b():
    return models.stand_in("qwen3-32b")


@pytest.fixture(scope="module")
def gemma3_27b():
    return models.stand_in("gemma-3-27b")


@pytest.fixture(scope="module")
def qwen35_27b():
    return models.stand_in("qwen3.5-27b")


@pytest.fixture(scope="module")
def qwen38_27b():
    return models.stand_in("qwen3.8-27b")


@pytest.fixture(scope="module")
def llama31_8b():
    return models.stand_in("llama-3.1-8b")


# ---------------------------------------------------------------- Qwen3-32B: 64 layers, 8 KV heads × 128
def test_qwen3_32b_per_token(qwen3_32b):
    # 2 (K and V) × 64 layers × 8 KV heads × 128 × 2 bytes = 262,144 B = 256 KiB (FACTS.md table)
    assert kvcache.kv_bytes_per_token(qwen3_32b, "f16") == 2 * 64 * 8 * 128 * 2 == 262_144


def test_qwen3_32b_64k_is_16_gib(qwen3_32b):
    assert kvcache.kv_cache_bytes(qwen3_32b, 65_536) == 262_144 * 65_536 == 16 * GIB


def test_qwen3_32b_q8_0_four_sequences(qwen3_32b):
    # a q8_0 row of 8 × 128 = 1024 elements is 32 blocks of 34 bytes = 1088 B
    per_token = 2 * 64 * (1024 // 32 * 34)
    assert per_token == 139_264
    assert kvcache.kv_cache_bytes(qwen3_32b, 8192, n_seqs=4, kv_dtype="q8_0") == per_token * 8192 * 4 == 4_563_402_752


def test_qwen3_32b_tensor_parallel_halves_per_gpu(qwen3_32b):
    b = kvcache.kv_cache_breakdown(qwen3_32b, 32_768, 1, "f16", tensor_parallel=2)
    assert b["kv_heads_per_gpu"] == 4
    assert b["per_gpu_bytes"] == 4 * GIB and b["total_bytes"] == 8 * GIB


# ---------------------------------------------------------------- Gemma-3-27B: 10 global + 52 local layers, window 1024
def test_gemma3_layers(gemma3_27b):
    assert gemma3_27b.global_layers == (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)
    assert len(gemma3_27b.local_layers) == 52 and gemma3_27b.sliding_window == 1024


def test_gemma3_64k_window_capped(gemma3_27b):
    per_layer_token = 2 * 16 * 128 * 2  # 8192 B
    global_b = 10 * per_layer_token * 65_536  # 5 GiB
    local_b = 52 * per_layer_token * 1024  # capped at the window
    b = kvcache.kv_cache_breakdown(gemma3_27b, 65_536)
    assert (b["global_bytes"], b["local_bytes"]) == (global_b, local_b) == (5_368_709_120, 436_207_616)
    assert b["per_gpu_bytes"] == 5_804_916_736


def test_gemma3_inside_window_all_layers_grow(gemma3_27b):
    assert kvcache.kv_cache_bytes(gemma3_27b, 512) == 62 * 8192 * 512 == 260_046_848
    assert kvcache.kv_bytes_per_token(gemma3_27b, "f16", "global") == 10 * 8192


# ---------------------------------------------------------------- Qwen3.5-27B: 16 full-attention + 48 Gated-DeltaNet layers
def test_qwen35_linear_state(qwen35_27b):
    conv = 3 * (2 * 16 * 128 + 48 * 128)  # (kernel 4 - 1) × (2 K heads·dim + V heads·dim)
    recurrent = 48 * 128 * 128
    assert qwen35_27b.linear_state_bytes_per_layer == (conv + recurrent) * 4 == 3_268_608
    assert len(qwen35_27b.linear_layers) == 48 and qwen35_27b.global_layers == tuple(range(3, 64, 4))


def test_qwen35_two_sequences(qwen35_27b):
    kv = 16 * 2 * 4 * 256 * 2 * 32_768 * 2  # 16 layers × K,V × 4 heads × 256 × 2 B × tokens × seqs
    state = 48 * 3_268_608 * 2
    assert kvcache.kv_cache_bytes(qwen35_27b, 32_768, n_seqs=2) == kv + state == 4_608_753_664
    # fp8 halves the KV, not the (F32) state
    assert kvcache.kv_cache_bytes(qwen35_27b, 32_768, n_seqs=2, kv_dtype="fp8") == kv // 2 + state


def test_qwen35_tp8_replicates_kv_heads(qwen35_27b):
    assert kvcache.kv_cache_breakdown(qwen35_27b, 1024, 1, "f16", 8)["kv_heads_per_gpu"] == 1


# ---------------------------------------------------------------- Qwen3.8-27B (the seeds' model): same hybrid shape
def test_qwen38_kv_per_token_counts_only_full_attention_layers(qwen38_27b):
    # 16 full-attention layers × (K and V) × 4 KV heads × 256 × 2 B (f16); the 48 Gated DeltaNet layers add nothing
    assert qwen38_27b.global_layers == tuple(range(3, 64, 4)) and len(qwen38_27b.linear_layers) == 48
    assert kvcache.kv_bytes_per_token(qwen38_27b, "f16") == 16 * 2 * 4 * 256 * 2 == 65_536


def test_qwen38_recurrent_state_per_sequence_is_llama_cpps(qwen38_27b):
    # llama.cpp src/llama-hparams.cpp, per recurrent layer, F32 (src/llama-model.cpp create_memory):
    #   n_embd_r = (ssm_d_conv - 1) * (ssm_d_inner + 2 * ssm_n_group * ssm_d_state)   (conv state)
    #   n_embd_s = ssm_d_state * ssm_d_inner                                          (delta-net state)
    # with, for LLM_ARCH_QWEN35 (src/models/qwen35.cpp): d_conv 4, d_inner = 48 V heads × 128 = 6144,
    # n_group = 16 K heads, d_state = 128
    n_embd_r = (4 - 1) * (6144 + 2 * 16 * 128)
    n_embd_s = 128 * 6144
    assert (n_embd_r, n_embd_s) == (30_720, 786_432)
    assert qwen38_27b.linear_state_bytes_per_layer == (n_embd_r + n_embd_s) * 4 == 3_268_608
    assert qwen38_27b.linear_state_bytes_per_seq == 48 * 3_268_608 == 156_893_184  # 149.625 MiB


def test_qwen38_64k_one_sequence(qwen38_27b):
    b = kvcache.kv_cache_breakdown(qwen38_27b, 65_536)
    assert b["global_bytes"] == 65_536 * 65_536 == 4 * GIB
    assert b["linear_state_bytes"] == 156_893_184 and b["per_gpu_bytes"] == 4 * GIB + 156_893_184


# ---------------------------------------------------------------- Llama-3.1-8B: 32 layers, 8 KV heads × 128
def test_llama31_8b(llama31_8b):
    assert kvcache.kv_bytes_per_token(llama31_8b) == 131_072
    assert kvcache.kv_cache_bytes(llama31_8b, 131_072) == 16 * GIB
    assert kvcache.kv_cache_bytes(llama31_8b, 8192, kv_dtype="q4_0") == 2 * 32 * (1024 // 32 * 18) * 8192 == 301_989_888


# ---------------------------------------------------------------- fit solver
def test_fit_limits_are_tight(qwen3_32b):
    r = kvcache.fit(qwen3_32b, weights_bytes=20_060_000_000, device_bytes=32 * GIB, context_tokens=32_768,
                    utilization=0.9, overhead_bytes=GIB)
    assert r["fits"] and r["headroom_bytes"] == r["kv_budget_bytes"] - 8 * GIB
    m = r["max_context_tokens"]
    assert kvcache.kv_cache_bytes(qwen3_32b, m) <= r["kv_budget_bytes"] < kvcache.kv_cache_bytes(qwen3_32b, m + 1)
    n = r["max_concurrent_sequences"]
    assert n * 8 * GIB <= r["kv_budget_bytes"] < (n + 1) * 8 * GIB


def test_fit_window_model_reaches_cap(gemma3_27b):
    # a model whose cache stops growing would fit any context: the answer is capped at max_context
    only_local = ArchSpec("w", "t", "test", 4, 4, 1, 64, 64, 256, 512, 1000, 4096, sliding_window=128,
                          local_layers=(0, 1, 2, 3))
    assert kvcache.max_context_tokens(only_local, 10**9) == 4096


def test_fit_nothing_fits(qwen3_32b):
    r = kvcache.fit(qwen3_32b, weights_bytes=40 * GIB, device_bytes=32 * GIB, context_tokens=1024)
    assert not r["fits"] and r["max_context_tokens"] == 0 and r["max_concurrent_sequences"] == 0


def test_memory_stack_rows(gemma3_27b):
    rows = kvcache.memory_stack(gemma3_27b, [1024, 8192], weights_bytes=16 * GIB, device_bytes=32 * GIB)
    assert [r["context_tokens"] for r in rows] == [1024, 8192]
    assert rows[1]["kv_local_bytes"] == rows[0]["kv_local_bytes"]  # the window caps local layers
    assert all(r["total_bytes"] == r["weights_bytes"] + r["overhead_bytes"] + r["kv_global_bytes"]
               + r["kv_local_bytes"] + r["linear_state_bytes"] for r in rows)


# ---------------------------------------------------------------- llama.cpp sizing rules (pure)
SMOL = ArchSpec("smollm2-shape", "llama", "test", 30, 9, 3, 64, 64, 576, 1536, 49152, 8192)
GEMMA270 = ArchSpec("gemma3-270m-shape", "gemma3", "test", 18, 4, 1, 256, 256, 640, 2048, 262144, 32768,
                    sliding_window=512, local_layers=tuple(i for i in range(18) if i % 6 < 5))


def test_llama_cpp_rounds_context_and_splits_slots():
    p = kvcache.llama_cpp_kv_prediction(SMOL, 3000, 3)
    assert (p["n_ctx"], p["n_ctx_seq"], p["n_stream"]) == (3072, 1024, 3)
    c = p["caches"][0]
    assert (c["cells"], c["layers"], c["size_mib"], c["k_mib"]) == (1024, 30, "67.50", "33.75")


def test_llama_cpp_slot_split_rounds_up_per_slot():
    # 4096 / 3 = 1365 → 1536 cells per slot, n_ctx re-derived as 4608 (llama-context.cpp)
    p = kvcache.llama_cpp_context(4096, 3)
    assert p == {"n_ctx": 4608, "n_ctx_seq": 1536, "n_stream": 3}


def test_llama_cpp_quantized_sizes():
    c = kvcache.llama_cpp_kv_prediction(SMOL, 3000, 3, "q8_0", "q4_0")["caches"][0]
    assert (c["k_mib"], c["v_mib"], c["size_mib"]) == ("17.93", "9.49", "27.42")


def test_llama_cpp_swa_cache_sizes():
    single = kvcache.llama_cpp_kv_prediction(GEMMA270, 4096)
    assert [(c["cache"], c["cells"], c["layers"], c["size_mib"]) for c in single["caches"]] == [
        ("global", 4096, 3, "12.00"), ("swa", 1024, 15, "15.00")]  # SWA: pad(512 + 512 ubatch, 256)
    unified = kvcache.llama_cpp_kv_prediction(GEMMA270, 4096, 4, kv_unified=True)
    assert unified["caches"][1]["cells"] == 2560  # 512 × 4 slots + 512
    small = kvcache.llama_cpp_kv_prediction(GEMMA270, 1000)
    assert small["caches"][1]["cells"] == 1024  # min(n_ctx_seq 1024, 1024)


def test_llama_cpp_mib_formatting():
    assert kvcache.llama_cpp_mib(70_778_880) == "67.50"
    assert kvcache.llama_cpp_mib(0) == "0.00"


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kwargs,match", [
    ({"kv_dtype": "int3"}, "unknown KV dtype 'int3'"),
    ({"tokens": 0}, "tokens must be a positive integer"),
    ({"tokens": -5}, "tokens must be a positive integer"),
    ({"tokens": 1.5}, "tokens must be a positive integer"),
    ({"n_seqs": 0}, "n_seqs must be a positive integer"),
    ({"tensor_parallel": 3}, "cannot be split over tensor_parallel=3"),
])
def test_bad_inputs(llama31_8b, kwargs, match):
    args = {"tokens": 1024, "n_seqs": 1, "kv_dtype": "f16", "tensor_parallel": 1, **kwargs}
    with pytest.raises(KvCacheError, match=match):
        kvcache.kv_cache_bytes(llama31_8b, **args)


def test_quantized_row_must_be_whole_blocks():
    odd = ArchSpec("odd", "t", "test", 2, 2, 1, 48, 48, 96, 96, 100, 512)
    with pytest.raises(KvCacheError, match="blocks of 32"):
        kvcache.kv_bytes_per_token(odd, "q8_0")


def test_bad_fit_inputs(llama31_8b):
    with pytest.raises(KvCacheError, match="utilization"):
        kvcache.fit(llama31_8b, weights_bytes=1, device_bytes=GIB, context_tokens=1, utilization=1.5)
    with pytest.raises(KvCacheError, match="n_ctx 100 is smaller than n_parallel 300"):
        kvcache.llama_cpp_context(100, 300)
    with pytest.raises(KvCacheError, match="layers must be"):
        kvcache.kv_bytes_per_token(llama31_8b, "f16", "some")


def test_a_layer_split_needs_no_head_count_that_divides_the_gpus(qwen3_32b, qwen38_27b):
    """llama.cpp's -sm layer puts whole layers on each GPU: SmolLM2's 3 KV heads on two cards are fine there, and
    notebook 05 crashed on them (found by tests/notebooks/test_gpu_replay.py, two V100s replayed)."""
    three = dataclasses.replace(qwen3_32b, n_kv_heads=3, name="3 KV heads")
    with pytest.raises(KvCacheError, match="cannot be split over tensor_parallel=2"):
        kvcache.kv_cache_breakdown(three, 4096, 1, "f16", tensor_parallel=2)  # vLLM refuses it too
    whole = kvcache.kv_cache_breakdown(three, 4096, 1, "f16")
    b = kvcache.kv_cache_breakdown(three, 4096, 1, "f16", tensor_parallel=2, split_by="layers")
    assert b["per_gpu_bytes"] == whole["total_bytes"] // 2 and b["total_bytes"] == whole["total_bytes"]
    # where the heads divide, both splits hold the same bytes per GPU (the hybrid's state included)
    for arch in (qwen3_32b, qwen38_27b):
        heads = kvcache.kv_cache_breakdown(arch, 32_768, 4, "q8_0", tensor_parallel=2)
        assert kvcache.kv_cache_breakdown(arch, 32_768, 4, "q8_0", 2, "layers")["per_gpu_bytes"] == heads["per_gpu_bytes"]


def test_the_context_one_request_gets_is_one_answer():
    """llama.cpp: -c split over -np, each rounded up to 256 (llama_cpp_context); vLLM: max_model_len; another engine's
    server: -c ÷ slots. endpoint_diagnose's probe and lab tune's check read this one function."""
    from lab.core import profiles
    from lab.diagnose import endpoint_diagnose
    from lab.predict import kvcache

    assert kvcache.context_per_request("llama.cpp", 10_000, 3) == 3_584  # 10,240 ÷ 3 = 3,413 → 3,584
    assert kvcache.context_per_request("vllm", 10_000, 3) == 10_000
    assert kvcache.context_per_request("external", 10_000, 3) == 3_333
    p = profiles.varied(profiles.load("cpu-default"), context_tokens=10_000, parallel_slots=3)
    assert endpoint_diagnose.context_for_probe(None, p) == (
        3_584, "the profile's context_tokens ÷ parallel_slots, rounded up to 256 as llama.cpp does")
    assert endpoint_diagnose.context_for_probe({"facts": {"context_per_request": 4096}}, p) == (4096, "reported by the server")
