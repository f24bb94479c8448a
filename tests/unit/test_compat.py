"""Compatibility rules (lab/data/compat_rules.yaml + lab/predict/compat.py) and lab.predict.plan.

Every rule has a passing and a failing case below; the seeds' original set-ups give the errors the
lab's FACTS predict; every shipped profile plans without errors.
"""
from __future__ import annotations

import json

import pytest

from lab.core.versions import cc_x10, compute_capability

from conftest import v100_x2_vllm
from lab.core import facts, profiles
from lab.predict import compat, compat_predicates, plan

SEVERITIES = {"error", "warn", "info"}


def _by_id(findings: list[compat.Finding], rule_id: str) -> list[compat.Finding]:
    return [f for f in findings if f.id == rule_id]


def _status(fact_dict: dict, rule_id: str) -> str:
    return next(r.status for r in compat.evaluate_all(fact_dict) if r.id == rule_id)


V100 = {"compute_capability": 7.0, "gpu_count": 1}
VLLM_V100 = {**V100, "engine": "vllm"}
LLAMA_GPU = {"engine": "llama.cpp", "gpu_count": 1}

# (rule id, facts where it holds, facts where it does not, severity, substrings of the message)
CASES = [
    ("driver_for_cuda_toolkit",
     {"driver_version": "535.129.03", "cuda_toolkit": "12.2"},
     {"driver_version": "470.82.01", "cuda_toolkit": "12.1"},
     "error", ["470.82.01", "525", "530.30.02"]),
    ("driver_for_cuda_toolkit",
     {"driver_version": "520.61.05", "cuda_toolkit": "11.8"},
     {"driver_version": "515.65.01", "cuda_toolkit": "11.8"},
     "warn", ["515.65.01", "520.61.05", "minor-version compatibility"]),
    ("driver_for_cuda_toolkit",  # 12.6 is not in the table: 12.4's minimum is a lower bound
     {"driver_version": "560.35.03", "cuda_toolkit": "12.6"},
     {"driver_version": "535.129.03", "cuda_toolkit": "12.6"},
     "warn", ["12.6", "12.4", "550.54.14"]),
    ("driver_for_torch_wheel",
     {"driver_version": "580.65.06", "torch_cuda_wheel": "cu128"},
     {"driver_version": "535.129.03", "torch_cuda_wheel": "cu130"},
     "error", ["535.129.03", "cu130", "580"]),
    ("cuda13_drops_pre_turing",
     {"cuda_toolkit": "12.8", "compute_capability": 7.0},
     {"cuda_toolkit": "13.0", "compute_capability": 7.0},
     "error", ["13.0", "sm_70", "Unsupported gpu architecture"]),
    ("cuda13_drops_pre_turing",
     {"cuda_toolkit": "13.0", "compute_capability": 8.9},
     {"cuda_toolkit": "13.1", "compute_capability": 6.1},
     "error", ["sm_61", "7.5"]),
    ("driver_branch_supported",
     {"driver_version": "580.65.06"},
     {"driver_version": "535.129.03"},
     "warn", ["535.129.03", "R535", "end of life 2026-06"]),
    ("last_driver_branch_for_volta",
     {"driver_version": "580.159.04", "compute_capability": 7.0},
     {"driver_version": "590.44.01", "compute_capability": 7.0},
     "error", ["590.44.01", "580"]),
    ("torch_wheel_has_gpu_arch",
     {"torch_cuda_wheel": "cu126", "torch_version": "2.7.1", "compute_capability": 7.0},
     {"torch_cuda_wheel": "cu128", "torch_version": "2.11.0", "compute_capability": 7.0},
     "error", ["2.11.0", "cu128", "sm_70", "2.10"]),
    ("torch_wheel_has_gpu_arch",
     {"torch_cuda_wheel": "cu128", "torch_version": "2.10.0", "compute_capability": 7.0},
     {"torch_cuda_wheel": "cu130", "torch_version": "2.9.0", "compute_capability": 7.0},
     "error", ["cu130", "sm_70"]),
    ("torch_wheel_has_gpu_arch",
     {"torch_cuda_wheel": "cu126", "torch_version": "2.14.0", "compute_capability": 7.0},
     {"torch_cuda_wheel": "cu126", "torch_version": "2.15.0", "compute_capability": 7.0},
     "warn", ["2.15.0", "2.14"]),
    ("torch_wheel_has_gpu_arch",
     {"torch_cuda_wheel": "cu130", "torch_version": "2.11.0", "compute_capability": 9.0},
     {"torch_cuda_wheel": "cpu", "torch_version": "2.7.1", "compute_capability": 9.0},
     "error", ["cpu wheel", "9.0"]),
    ("torch_arch_list_covers_gpu",
     {"torch_arch_list": ["sm_70", "sm_75", "sm_80"], "compute_capability": 7.0},
     {"torch_arch_list": ["sm_75", "sm_80", "sm_90", "compute_90"], "compute_capability": 7.0},
     "error", ["sm_70", "no kernel image"]),
    ("torch_arch_list_covers_gpu",  # sm_80 cubins run on 8.6; compute_80 PTX JITs on 8.9; not on 7.5
     {"torch_arch_list": ["sm_80"], "compute_capability": 8.6},
     {"torch_arch_list": ["sm_80", "compute_80"], "compute_capability": 7.5},
     "error", ["sm_75"]),
    ("vllm_supports_gpu_arch",  # measured: 0.20.0's PyPI wheel has no sm_70 (lab/data/vllm_volta.yaml)
     {**VLLM_V100, "engine_version": "0.10.1.1"},
     {**VLLM_V100, "engine_version": "0.20.0"},
     "error", ["0.20.0", "no sm_70", "vllm-0.20.0-cp38-abi3", "2.11.0", "0.19.0"]),
    ("vllm_supports_gpu_arch",  # 0.18.0 is no longer documented on Volta but its wheel carries sm_70
     {**VLLM_V100, "engine_version": "0.10.1.1"},
     {**VLLM_V100, "engine_version": "0.18.0"},
     "warn", ["0.18.0", "carries sm_70", "torch 2.10.0", "untested"]),
    ("vllm_supports_gpu_arch",
     {**VLLM_V100, "engine_version": "0.4.2"},
     {**VLLM_V100, "engine_version": "0.11.0"},
     "warn", ["0.11.0", "V1", "0.10.1.1"]),
    ("vllm_supports_gpu_arch",
     {"engine": "vllm", "compute_capability": 9.0, "engine_version": "0.33.0"},
     {"engine": "vllm", "compute_capability": 6.1, "engine_version": "0.10.1.1"},
     "error", ["7.0", "6.1"]),
    ("vllm_supports_model",
     {"engine": "vllm", "engine_version": "0.10.1.1", "model_architecture": "config:qwen3-32b"},
     {"engine": "vllm", "engine_version": "0.4.2", "model_architecture": "config:qwen3-32b"},
     "error", ["0.4.2", "qwen3-32b", "0.8.4"]),
    ("vllm_supports_model",  # the seeds' model is a Qwen3.5-family hybrid: 0.17.0 on
     {"engine": "vllm", "engine_version": "0.17.0", "model_architecture": "config:qwen3.8-27b"},
     {"engine": "vllm", "engine_version": "0.10.1.1", "model_architecture": "config:qwen3.8-27b"},
     "error", ["qwen3.8-27b", "0.17.0"]),
    ("vllm_serves_hybrid_on_volta",  # the wheels allow it, nobody reported it working: a warning
     {"engine": "vllm", "engine_version": "0.17.0", "compute_capability": 8.0, "model_architecture": "config:qwen3.8-27b"},
     {**VLLM_V100, "engine_version": "0.17.0", "model_architecture": "config:qwen3.8-27b"},
     "warn", ["qwen3.8-27b", "7.0", "0.17.0-0.19.0", "Triton (3.6)", "no public report", "1CatAI/1Cat-vLLM"]),
    ("vllm_serves_hybrid_on_volta",  # from 0.20 the wheel has no sm_70 at all
     {"engine": "vllm", "engine_version": "0.33.0", "compute_capability": 8.6, "model_architecture": "config:qwen3.8-27b"},
     {**VLLM_V100, "engine_version": "0.33.0", "model_architecture": "config:qwen3.8-27b"},
     "error", ["0.33.0", "no sm_70", "0.17.0-0.19.0"]),
    ("quant_format_min_capability",
     {**VLLM_V100, "model_quant": "BNB-NF4"},
     {**VLLM_V100, "model_quant": "AWQ-INT4"},
     "error", ["AWQ-INT4", "7.5", "Minimum capability: 75. Current capability: 70."]),
    ("quant_format_min_capability",
     {"engine": "vllm", "compute_capability": 8.9, "model_quant": "FP8"},
     {**VLLM_V100, "model_quant": "FP8"},
     "error", ["FP8", "8.0"]),
    ("quant_format_min_capability",
     {"engine": "vllm", "compute_capability": 8.9, "model_quant": "GPTQ-INT4"},
     {"engine": "vllm", "compute_capability": 8.6, "model_quant": "FP8"},
     "info", ["Marlin", "8.9"]),
    ("vllm_kernel_min_capability",
     {**VLLM_V100, "vllm_quantization": "gptq"},
     {**VLLM_V100, "vllm_quantization": "gptq_marlin"},
     "error", ["gptq_marlin", "7.5", "7.0"]),
    ("vllm_kernel_min_capability",  # read from a command line
     {**VLLM_V100, "engine_command": "vllm serve m --quantization gptq"},
     {**VLLM_V100, "engine_command": "vllm serve m --quantization awq"},
     "error", ["awq", "7.5"]),
    ("bf16_needs_ampere",
     {**VLLM_V100, "dtype": "half"},
     {**VLLM_V100, "dtype": "bfloat16"},
     "error", ["bfloat16", "8.0", "7.0"]),
    ("bf16_needs_ampere",  # before vLLM 0.8.5, auto did not fall back
     {"engine": "vllm", "compute_capability": 8.0, "dtype": "bfloat16"},
     {**VLLM_V100, "dtype": "auto", "engine_version": "0.8.4"},
     "warn", ["auto", "half", "0.8.5"]),
    ("bf16_needs_ampere",  # from 0.8.5 (PR #17265) auto falls back to float16 with a warning
     {**VLLM_V100, "dtype": "half", "engine_version": "0.10.1.1"},
     {**VLLM_V100, "dtype": "auto", "engine_version": "0.10.1.1"},
     "info", ["auto", "float16", "0.8.5"]),
    ("fp8_kv_cache_capability",
     {**VLLM_V100, "kv_cache_dtype": "auto", "engine_version": "0.10.1.1"},
     {**VLLM_V100, "kv_cache_dtype": "fp8", "engine_version": "0.11.0"},
     "error", ["fp8", "8.9", "7.0"]),
    ("fp8_kv_cache_capability",
     {"engine": "vllm", "compute_capability": 8.9, "kv_cache_dtype": "fp8", "engine_version": "0.18.0"},
     {**VLLM_V100, "kv_cache_dtype": "fp8_e5m2", "engine_version": "0.4.2"},
     "warn", ["V0", "8.9"]),
    ("fp8_kv_cache_capability",  # the 8.9 limit is Triton's e4m3 type; e5m2 is undocumented on Volta, not refused
     {**VLLM_V100, "kv_cache_dtype": "auto", "engine_version": "0.18.0"},
     {**VLLM_V100, "kv_cache_dtype": "fp8_e5m2", "engine_version": "0.18.0"},
     "warn", ["fp8_e5m2", "e4m3", "7.0"]),
    ("kv_cache_dtype_for_engine",
     {"engine": "llama.cpp", "kv_cache_dtype": "q8_0"},
     {"engine": "llama.cpp", "kv_cache_dtype": "fp8"},
     "error", ["llama.cpp", "fp8"]),
    ("kv_cache_dtype_for_engine",
     {"engine": "vllm", "kv_cache_dtype": "fp8_e4m3"},
     {"engine": "vllm", "kv_cache_dtype": "q8_0"},
     "error", ["vllm", "q8_0"]),
    ("llama_cpp_offloads_layers",
     {**LLAMA_GPU, "n_gpu_layers": -1},
     {**LLAMA_GPU, "n_gpu_layers": 0},
     "error", ["n_gpu_layers is 0", "1 GPU"]),
    ("llama_cpp_build_has_gpu",
     {**LLAMA_GPU, "llama_cpp_gpu_offload": True},
     {**LLAMA_GPU, "llama_cpp_gpu_offload": False},
     "error", ["llama_supports_gpu_offload() is False"]),
    ("vllm_flags_current",
     {"engine": "vllm", "engine_version": "0.18.0", "engine_command": "vllm serve m --tensor-parallel-size 2"},
     {"engine": "vllm", "engine_version": "0.18.0", "engine_command": "vllm serve m --swap-space 16"},
     "error", ["--swap-space", "0.18.0", "#36216"]),
    ("vllm_flags_current",
     {"engine": "vllm", "engine_version": "0.10.0", "engine_command": "vllm serve m --swap-space 16 --disable-log-requests"},
     {"engine": "vllm", "engine_version": "0.11.0", "engine_command": "vllm serve m --swap-space 16"},
     "warn", ["--swap-space", "does nothing", "V1"]),
    ("vllm_flags_current",
     {"engine": "vllm", "engine_version": "0.10.1.1", "engine_command": "vllm serve m --no-enable-log-requests"},
     {"engine": "vllm", "engine_version": "0.17.0", "engine_command": "vllm serve m --disable-log-requests"},
     "error", ["--disable-log-requests", "0.17.0"]),
    ("vllm_flags_current",
     {"engine": "vllm", "engine_version": "0.10.0", "engine_command": "vllm serve m --disable-log-requests"},
     {"engine": "vllm", "engine_version": "0.10.1.1", "engine_command": "vllm serve m --disable-log-requests"},
     "warn", ["--disable-log-requests", "deprecated", "0.10.1"]),
    ("llama_cpp_tool_names",
     {**LLAMA_GPU, "engine_command": "llama-server -m m.gguf -ngl 99 -c 8192"},
     {**LLAMA_GPU, "engine_command": "./main -m m.gguf -n 128 -ngl 99"},
     "warn", ["./main", "llama-cli"]),
    ("llama_cpp_tool_names",
     {**LLAMA_GPU, "engine_command": "python convert_hf_to_gguf.py /m --outtype f16"},
     {**LLAMA_GPU, "engine_command": "python convert-hf-to-gguf.py /m --outtype f16"},
     "warn", ["convert_hf_to_gguf.py"]),
    # the Volta fork (engine_build): stock vLLM's wheel and kernel rules do not apply, its own does
    ("vllm_fork_on_volta",
     {**VLLM_V100, "engine_build": "1cat-vllm", "model_quant": "AWQ-INT4", "kv_cache_dtype": "auto",
      "model_architecture": "config:qwen3-32b"},
     {**VLLM_V100, "engine_build": "1cat-vllm", "compute_capability": 8.6, "model_quant": "AWQ-INT4",
      "kv_cache_dtype": "auto", "model_architecture": "config:qwen3-32b"},
     "error", ["7.0 only", "8.6", "stock vLLM"]),
    ("vllm_fork_on_volta",
     {**VLLM_V100, "engine_build": "1cat-vllm", "model_quant": "FP8", "kv_cache_dtype": "fp8_e5m2",
      "model_architecture": "config:qwen3-32b"},
     {**VLLM_V100, "engine_build": "1cat-vllm", "model_quant": "FP8", "kv_cache_dtype": "fp8_e4m3",
      "model_architecture": "config:qwen3-32b"},
     "error", ["fp8e4nv", "fp8_e5m2"]),
    ("tensor_parallel_uses_gpus",
     {"engine": "vllm", "gpu_count": 2, "tensor_parallel_size": 2},
     {"engine": "vllm", "gpu_count": 2, "tensor_parallel_size": 1},
     "info", ["tensor_parallel_size 1", "2 GPUs", "idle"]),
]


@pytest.mark.parametrize("rule_id,good,bad,severity,parts", CASES,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_rule_passes_and_fails(rule_id, good, bad, severity, parts):
    assert _status(good, rule_id) == "pass", compat.evaluate(good)
    assert not _by_id(compat.evaluate(good), rule_id)
    found = _by_id(compat.evaluate(bad), rule_id)
    assert [f.severity for f in found] == [severity], found
    for part in parts:
        assert part in found[0].message, f"{part!r} not in {found[0].message!r}"
    assert found[0].fix and found[0].source


def test_every_rule_has_a_passing_and_a_failing_case():
    assert {r["id"] for r in compat.rules()} == {c[0] for c in CASES}


# ---------------------------------------------------------------- the data and the engine
def test_rules_are_sourced_data():
    data = facts.load("compat_rules", "rules")  # refuses an entry without a source
    assert len(data["rules"]) == len(compat_predicates.PREDICATES)
    for rule in compat.rules():
        assert rule["source"].strip() and rule["fix"].strip() and rule["description"].strip()
        assert rule["severity"] in SEVERITIES
        assert set(rule["inputs"]) <= set(compat.FACT_KEYS)


def test_unknown_inputs_skip_rules_instead_of_failing_them():
    assert compat.evaluate({}) == []
    results = compat.evaluate_all({})
    assert {r.status for r in results} == {"skip"}
    driver = next(r for r in results if r.id == "driver_for_cuda_toolkit")
    assert driver.missing == ["driver_version", "cuda_toolkit"]
    check = driver.to_check()
    assert check.status == "skip" and "driver_version" in check.observed


def test_rule_for_another_engine_does_not_apply():
    result = next(r for r in compat.evaluate_all({"engine": "llama.cpp", "compute_capability": 7.0, "dtype": "bfloat16"})
                  if r.id == "bf16_needs_ampere")
    assert result.status == "skip" and "engine is llama.cpp" in result.skip_reason


def test_a_typo_in_a_fact_key_is_refused():
    with pytest.raises(ValueError, match="compute_capabilty"):
        compat.evaluate({"compute_capabilty": 7.0})


def test_bookkeeping_keys_are_ignored():
    assert compat.evaluate({"origin": {"driver_version": "seen here"}}) == []


def test_compute_capability_may_be_a_string():
    assert _by_id(compat.evaluate({"cuda_toolkit": "13.0", "compute_capability": "7.0"}), "cuda13_drops_pre_turing")


def test_findings_are_sorted_worst_first_and_serialisable():
    found = compat.evaluate({**VLLM_V100, "engine_version": "0.11.0", "model_quant": "GPTQ-INT4",
                             "dtype": "auto", "kv_cache_dtype": "fp8"})
    order = [compat.SEVERITY_ORDER[f.severity] for f in found]
    assert order == sorted(order) and found[0].severity == "error"
    json.dumps([f.to_dict() for f in found], allow_nan=False)


def test_checks_map_severities_to_check_statuses():
    statuses = {c.name: c.status for c in compat.checks({**VLLM_V100, "dtype": "bfloat16", "model_quant": "GPTQ-INT4"})}
    assert statuses["bf16_needs_ampere"] == "fail"
    assert statuses["quant_format_min_capability"] == "pass"  # an info note is not a problem
    assert statuses["driver_for_cuda_toolkit"] == "skip"


def test_version_helpers():
    assert cc_x10(7.0) == 70 and cc_x10("8.9") == 89 and cc_x10(12.0) == 120
    # one parser: the engine rules' tuple and the compatibility data's ×10 integer agree
    for cc in ("6.1", "7.0", 7.5, "8.6", "8.9", "9.0", 12.0, "12.1"):
        major, minor = compute_capability(cc)
        assert cc_x10(cc) == major * 10 + minor
    assert compute_capability(None) is None and compute_capability("") is None
    assert compat_predicates.wheel_cuda("cu126") == "12.6" and compat_predicates.wheel_cuda("cu130") == "13.0"
    assert compat_predicates.wheel_cuda("cpu") is None


# ---------------------------------------------------------------- the seeds' set-ups as written
SEED_000_COMMAND = (
    "python -m vllm.entrypoints.openai.api_server --model ./qwen27b-awq --tensor-parallel-size 2 "
    "--gpu-memory-utilization 0.92 --max-model-len 65536 --quantization awq --dtype float16 "
    "--swap-space 16 --disable-log-requests")
SEED_000 = {  # two V100 32G, driver 535.129.03 + CUDA 12.2, pip install vllm==0.4.2, Qwen3.8-27B-AWQ
    "compute_capability": 7.0, "gpu_count": 2, "nvlink_expected": True,
    "driver_version": "535.129.03", "cuda_toolkit": "12.2",
    "engine": "vllm", "engine_version": "0.4.2", "engine_command": SEED_000_COMMAND,
    "model_architecture": "config:qwen3.8-27b",  # the seed's own model
    "model_quant": "AWQ-INT4", "dtype": "float16", "kv_cache_dtype": "auto", "tensor_parallel_size": 2,
}


def _errors(fact_dict: dict) -> set[str]:
    return {f.id for f in compat.evaluate(fact_dict) if f.severity == "error"}


def test_seed_000_as_written_fails_where_the_facts_say():
    assert _errors(SEED_000) == {"quant_format_min_capability",  # AWQ needs 7.5
                                 "vllm_kernel_min_capability",   # --quantization awq
                                 "vllm_supports_model"}          # 0.4.2 predates the Qwen3.5 family (0.17.0)
    ids = {f.id for f in compat.evaluate(SEED_000)}
    assert "driver_for_cuda_toolkit" not in ids  # the seed's 535 + 12.2 is a working pair
    assert "bf16_needs_ampere" not in ids         # it did pass --dtype float16
    assert "vllm_flags_current" in ids            # the api_server entry point is deprecated (a note)


def test_seed_000_with_its_tuning_advice_on_a_current_vllm():
    """Section 4's `--kv-cache-dtype fp8`, `auto` dtype and today's vLLM: more errors, not fewer."""
    tuned = {**SEED_000, "engine_version": "0.20.0", "kv_cache_dtype": "fp8", "dtype": "auto",
             "engine_command": SEED_000_COMMAND.replace("--dtype float16", "--kv-cache-dtype fp8")}
    errors = _errors(tuned)
    assert {"vllm_supports_gpu_arch", "fp8_kv_cache_capability", "quant_format_min_capability",
            "vllm_flags_current"} <= errors
    flags = [f.message for f in compat.evaluate(tuned) if f.id == "vllm_flags_current"]
    assert any("--swap-space" in m for m in flags) and any("--disable-log-requests" in m for m in flags)
    # dtype auto: vLLM 0.20 falls back to float16 with a warning (PR #17265, from 0.8.5): a note, not an error
    assert any(f.id == "bf16_needs_ampere" and f.severity == "info" for f in compat.evaluate(tuned))


def test_seed_000_with_bf16():
    assert "bf16_needs_ampere" in _errors({**SEED_000, "dtype": "bfloat16"})


def test_seed_001_driver_advice():
    """Seed 001: 'use driver 470 or 515 with CUDA 11.8 / 12.1, avoid 535'."""
    assert "driver_for_cuda_toolkit" in _errors({"driver_version": "470.256.02", "cuda_toolkit": "12.1"})
    warn = compat.evaluate({"driver_version": "515.105.01", "cuda_toolkit": "11.8"})
    # 515 runs 11.8 only through minor-version compatibility, and R515 is past NVIDIA's end of life
    assert sorted((f.id, f.severity) for f in warn) == [("driver_branch_supported", "warn"),
                                                         ("driver_for_cuda_toolkit", "warn")]


def test_seed_001_llama_cpp_commands():
    found = compat.evaluate({**LLAMA_GPU, "n_gpu_layers": -1,
                             "engine_command": "./server -m qwen3.8-27b-q4_k_m.gguf -ngl 99 -c 8192 --host 0.0.0.0"})
    assert [(f.id, f.severity) for f in found] == [("llama_cpp_tool_names", "warn")]


def test_corrected_v100_x2_profile_is_free_of_errors():
    prof = profiles.load("v100-32g-x2-nvlink")
    found = compat.evaluate(compat.facts_from_profile(prof))
    assert not [f for f in found if f.severity in ("error", "warn")], found
    assert prof.engine == "llama.cpp" and prof.model_architecture == "config:qwen3.8-27b"


def test_the_seeds_vllm_plan_for_qwen38_on_two_v100s_is_judged():
    """The seed's route — vLLM tensor parallel 2 on V100s — for its own model: the release that loads the
    architecture does not list Volta, and no release documents the Gated DeltaNet kernels there."""
    plan = {"engine": "vllm", "compute_capability": 7.0, "gpu_count": 2, "tensor_parallel_size": 2,
            "model_architecture": "config:qwen3.8-27b", "model_quant": "GPTQ-INT4", "dtype": "half",
            "kv_cache_dtype": "auto"}
    assert "vllm_supports_model" in _errors({**plan, "engine_version": "0.10.1.1"})
    # 0.17.0: its wheel, torch 2.10 and Triton 3.6 carry sm_70 (measured): warnings, not errors — unverified
    first = {f.id: f.severity for f in compat.evaluate({**plan, "engine_version": "0.17.0"})}
    assert first["vllm_supports_gpu_arch"] == first["vllm_serves_hybrid_on_volta"] == "warn"
    assert "vllm_supports_model" not in first
    # 0.33.0 (current): no sm_70 in the wheel, nor in its torch 2.14 (CUDA 13.0)
    assert _errors({**plan, "engine_version": "0.33.0"}) >= {"vllm_supports_gpu_arch", "vllm_serves_hybrid_on_volta"}
    fix = next(f for f in compat.evaluate({**plan, "engine_version": "0.17.0"}) if f.id == "vllm_serves_hybrid_on_volta").fix
    assert "-sm layer -ts 1,1" in fix and "1Cat-vLLM" in fix and "community" in fix


# ---------------------------------------------------------------- facts_from_profile and plan
def test_facts_from_profile_declares_what_the_profile_says():
    f = compat.facts_from_profile(v100_x2_vllm())
    assert set(f) == set(compat.FACT_KEYS)
    assert f["compute_capability"] == 7.0 and f["gpu_count"] == 2 and f["tensor_parallel_size"] == 2
    assert f["engine"] == "vllm" and f["engine_version"] == "0.10.1.1" and f["model_quant"] == "GPTQ-INT4"
    assert f["torch_arch_list"] is None and f["llama_cpp_gpu_offload"] is None  # run-time only
    cpu = compat.facts_from_profile(profiles.load("cpu-default"))
    assert cpu["compute_capability"] is None and cpu["gpu_count"] == 0


@pytest.mark.parametrize("path", profiles.all_profiles(), ids=lambda p: p.stem)
def test_plan_on_every_shipped_profile(path):
    prof = profiles.load(path)
    result = plan.plan(prof)
    assert result["profile"] == prof.name
    assert isinstance(result["findings"], list)
    for f in result["findings"]:
        assert set(f) == {"id", "severity", "message", "fix", "source"} and f["severity"] in SEVERITIES
    assert not [f for f in result["findings"] if f["severity"] == "error"], result["findings"]
    json.dumps(result, allow_nan=False)
    text = plan.describe(result)
    assert prof.name in text and "0 error(s)" in text


def test_plan_accepts_a_name_and_reports_errors(tmp_path):
    assert plan.plan("v100-32g-x1")["profile"] == "v100-32g-x1"
    broken = profiles.load("v100-32g-x1").model_copy(update={"n_gpu_layers": 0, "cuda_toolkit": "13.0",
                                                             "driver_version": "535.129.03"})
    result = plan.plan(broken)
    # CUDA 13 on a V100 is wrong twice: nvcc cannot build sm_70, and driver 535 is below 13.x's floor (580)
    # (-ngl 0 also moves the weights to host RAM: the memory plan says so too)
    assert {f["id"] for f in result["findings"] if f["severity"] == "error"} == {
        "llama_cpp_offloads_layers", "cuda13_drops_pre_turing", "driver_for_cuda_toolkit"}
    assert "3 error(s)" in plan.describe(result)


@pytest.mark.parametrize("driver, warned", [("535.129.03", True), ("570.26", True), ("515.65.01", True),
                                            ("580.65.06", False)])
def test_driver_branch_past_end_of_life_is_a_warning(driver, warned):
    """NVIDIA's support table (read 2026-12-01): R535 ended June 2026, R570 February 2026, R515 long ago; R580 to June
    2028 (the table of the 615 and 620 driver docs, read 2026-12-05)."""
    result = next(r for r in compat.evaluate_all({"driver_version": driver}) if r.id == "driver_branch_supported")
    assert result.status == ("warn" if warned else "pass"), result
    if warned:
        assert "end of life" in result.findings[0].message
    rule = next(r for r in compat.rules() if r["id"] == "driver_branch_supported")
    assert rule["end_of_life"]["580"] == "2028-06" and "End of Life June 2028" in rule["source"]
