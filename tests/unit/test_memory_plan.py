"""The memory plan of a profile and the seeds' KV claims (pure arithmetic over the shipped data)."""
import pytest
from conftest import setup_missing

from lab.core import profiles
from lab.model import models
from lab.predict import memory_plan
from lab.core.profiles import Profile

V100_VLLM = dict(
    name="v100-test", description="test", gpu_name_pattern="V100", gpu_count=2, gpu_vram_mib=32768,
    gpu_compute_capability="7.0", gpu_memory_bandwidth_gb_s=900, nvlink_expected=True, engine="vllm",
    engine_version="0.10.2", model_name="Qwen/Qwen3-32B", model_architecture="config:qwen3-32b",
    model_quant="GPTQ-INT4", context_tokens=32768, tensor_parallel_size=2, gpu_memory_utilization=0.92,
)


def test_vllm_plan_splits_over_tensor_parallel():
    plan = memory_plan.plan_memory(Profile(**V100_VLLM))
    assert plan["memory_kind"] == "GPU VRAM" and plan["devices"] == 2
    assert plan["kv_bytes_per_token"] == 262_144
    assert plan["kv_bytes_per_device"] == 4 << 30  # 32K × 256 KiB / 2 GPUs
    assert plan["fits"] and plan["max_concurrent_sequences"] >= 1
    assert plan["max_context_tokens"] == 40960  # capped at the model's trained context
    assert plan["findings"] == []


def test_context_beyond_training_is_a_warning():
    plan = memory_plan.plan_memory(Profile(**{**V100_VLLM, "context_tokens": 65536}))
    assert [f["severity"] for f in plan["findings"] if f["id"] == "context-beyond-training"] == ["warn"]


def test_plan_that_does_not_fit_says_what_to_change():
    plan = memory_plan.plan_memory(Profile(**{**V100_VLLM, "gpu_count": 1, "tensor_parallel_size": 1,
                                              "nvlink_expected": False, "context_tokens": 40960,
                                              "parallel_slots": 4}))
    assert not plan["fits"]
    finding = next(f for f in plan["findings"] if f["id"] == "kv-does-not-fit")
    assert finding["severity"] == "error" and "max-model-len" in finding["fix"]
    assert plan["max_concurrent_sequences"] < 4


def test_kv_dtype_foreign_to_engine_is_a_finding():
    plan = memory_plan.plan_memory(Profile(**{**V100_VLLM, "kv_cache_dtype": "q8_0"}))
    assert any(f["id"] == "kv-dtype-engine" for f in plan["findings"])


def test_weights_for_formats():
    from lab.model import weights

    arch = models.stand_in("qwen3-32b")
    q4 = weights.weights_bytes("Q4_K_M", arch=arch)[0]
    assert 19.5e9 < q4 < 20.5e9  # 32.76e9 × 4.899 / 8
    awq = weights.weights_bytes("AWQ-INT4", arch=arch)[0]
    assert awq > arch.params * 4.156 / 8  # embeddings stay at 16 bits
    with pytest.raises(KeyError, match="unknown weight format"):
        weights.weights_bytes("Q1_X", arch=arch)


def test_cpu_default_uses_host_ram():
    from lab.core import paths

    try:
        paths.embedded_model("smollm2")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
    plan = memory_plan.plan_memory(profiles.load("cpu-default"))
    assert plan["memory_kind"] == "host RAM" and plan["fits"]
    assert plan["kv_bytes_total"] == 90 * (1 << 20)  # -c 4096 -np 4: 4 × 1024 cells × 30 layers × 384 B × 2
    assert any(f["id"] == "memory-is-host-ram" for f in plan["findings"])


def test_llama_cpp_plan_allocates_every_slot():
    v100 = profiles.load("v100-32g-x1")  # -c 131072 -np 4, Qwen3.8-27B Q4_K_M, f16 KV
    arch = models.stand_in("qwen3.8-27b")
    plan = memory_plan.plan_memory(v100)
    # 16 full-attention layers: 64 KiB per token, over all 131072 cells; plus one recurrent state per slot
    assert plan["kv_bytes_per_token"] == 64 << 10
    assert plan["kv_bytes_total"] == (8 << 30) + 4 * arch.linear_state_bytes_per_seq
    assert plan["context_tokens_per_sequence"] == 32768 and plan["fits"]
    assert plan["budget_bytes"] == 32 << 30  # llama.cpp has no utilisation knob: the whole card
    tight = memory_plan.plan_memory(v100.model_copy(update={"context_tokens": 262144 * 2}))
    assert not tight["fits"]
    fix = next(f for f in tight["findings"] if f["id"] == "kv-does-not-fit")["fix"]
    assert f"-c; {tight['max_context_tokens']} per slot" in fix and "q8_0" in fix


def test_weights_bytes_is_exact_for_a_modelled_stand_in_else_params_times_bits():
    from lab.model import weights

    arch = models.stand_in("qwen3-32b")
    exact, basis = weights.weights_bytes("Q4_K_M", arch=arch, model_id="qwen3-32b")
    assert exact == 19_756_174_336 and "lab.model.quant_formats.predict_size" in basis
    naive, basis = weights.weights_bytes("Q4_K_M", arch=arch)  # no stand-in id: params x weight_bits.yaml bits
    assert naive == pytest.approx(arch.params * 4.899 / 8, abs=1) and "weight_bits.yaml" in basis
    gptq, _ = weights.weights_bytes("GPTQ-INT4", arch=arch, model_id="qwen3-32b")  # no GGUF mix for GPTQ: bits, embeddings at 16
    assert gptq == weights.weights_bytes("GPTQ-INT4", arch=arch)[0]
    assert weights.weights_bytes("Q4_K_M", params=27e9)[0] == pytest.approx(27e9 * 4.899 / 8, abs=1)
    assert weights.bits_per_weight("INT4") == weights.bits_per_weight("AWQ-INT4")


def test_hybrid_plan_counts_attention_kv_and_recurrent_state():
    """Qwen3.8-27B on the V100 profile (llama.cpp, -c 32768, 4 slots, f16): KV only for the 16 full-attention
    layers, plus one 149.6 MiB F32 state per slot for the 48 Gated DeltaNet layers, both in the fit."""
    from lab.predict import plan as plan_mod

    v100 = profiles.load("v100-32g-x1").model_copy(update={"model_architecture": "config:qwen3.8-27b",
                                                           "context_tokens": 32768, "parallel_slots": 4})
    mem = memory_plan.plan_memory(v100)
    assert mem["kv_bytes_per_token"] == 65_536 and mem["recurrent_layers"] == 48
    assert mem["recurrent_state_bytes_per_sequence"] == 156_893_184
    assert mem["recurrent_state_bytes_total"] == 4 * 156_893_184
    assert mem["kv_attention_bytes_total"] == 32_768 * 65_536  # 4 slots × 8192 cells × 64 KiB
    assert mem["kv_bytes_total"] == mem["kv_attention_bytes_total"] + mem["recurrent_state_bytes_total"]
    assert mem["weights_bytes"] == 16_536_406_016  # Q4_K_M, exact (lab.model.weights)
    text = plan_mod.describe({"profile": "x", "findings": [], **{k: mem[k] for k in plan_mod.MEMORY_KEYS}})
    assert "recurrent state 0.58 GiB (149.62 MiB/sequence, Gated DeltaNet layers)" in text  # GiB like every size


def test_llama_cpp_places_the_weights_as_it_does_on_a_16_gb_card():
    """The 4060 Ti plan: unsloth's UD-IQ4_XS as published (14,252,845,984 B with its MTP block), less the MTP block
    llama.cpp skips and the token embedding it keeps in host memory; the CUDA context and the compute buffer shown
    apart (lab/data/runtime_overhead.yaml)."""
    from lab.model import quant_targets

    prof = profiles.load("rtx4060ti-16g")
    plan = memory_plan.plan_memory(prof)
    mix = quant_targets.gguf_parts("qwen3.8-27b", "IQ4_XS")
    assert plan["weights_file_bytes"] == 14_252_845_984
    assert plan["weights_mtp_bytes"] == mix["mtp"] == 226_531_328
    assert plan["weights_host_bytes"] == mix["token_embd"] == 675_430_400   # IQ4_XS token_embd, in host memory
    assert plan["weights_bytes"] == 14_252_845_984 - 226_531_328
    assert plan["weights_bytes_per_device"] == plan["weights_bytes"] - 675_430_400
    over = memory_plan.runtime_overhead("llama.cpp-gpu")
    assert plan["overhead_parts"] == {"cuda_context": 419_430_400, "compute_buffer": 901_775_360}
    assert sum(over["parts"].values()) == over["bytes"] == plan["overhead_bytes"]
    left = plan["budget_bytes"] - plan["weights_bytes_per_device"] - plan["kv_bytes_per_device"] - plan["overhead_bytes"]
    assert plan["fits"] and round(left / 2**30, 2) == 1.66


def test_the_embedding_stays_on_the_host_for_every_llama_cpp_gpu_profile():
    for name in ("v100-32g-x1", "rtx4090-24g"):
        plan = memory_plan.plan_memory(profiles.load(name))
        # Q4_K_M: token_embd Q4_K, 5120 × 248,320 × 4.5 bits = 682.03 MiB (the H200 record's CPU_Mapped buffer)
        assert plan["weights_host_bytes"] == 715_161_600 and round(plan["weights_host_bytes"] / 2**20, 2) == 682.03
        assert plan["weights_file_bytes"] == 16_799_719_424 and plan["weights_mtp_bytes"] == 263_313_408


def test_a_fit_with_less_to_spare_than_the_cuda_context_estimate_warns():
    """`fits: True` with a few hundred MiB left rests on the 400 MiB CUDA-context estimate (runtime_overhead.yaml):
    the plan says so (tight-fit, a warning) and how much is spare."""
    v100 = profiles.load("v100-32g-x1")
    roomy = memory_plan.plan_memory(v100)
    assert roomy["fits"] and roomy["spare_bytes"] > 2**30 and "tight-fit" not in {f["id"] for f in roomy["findings"]}
    tight = memory_plan.plan_memory(v100.model_copy(update={
        "context_tokens": roomy["max_context_tokens"] * v100.parallel_slots}))
    found = {f["id"]: f for f in tight["findings"]}
    assert tight["fits"] and 0 <= tight["spare_bytes"] < 400 * 2**20, tight["spare_bytes"]
    assert found["tight-fit"]["severity"] == "warn" and "400 MiB" not in found["tight-fit"]["message"]
    assert "0.39 GiB CUDA context" in found["tight-fit"]["message"]
