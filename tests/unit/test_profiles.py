"""Profiles: every shipped one validates; every malformed one fails with a message that names the
file, the field and what was found (nanoGPT's configurator standard, not papermill's warning)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lab.core import paths, profiles
from lab.model import models
from lab.core.profiles import ProfileError

SHIPPED = profiles.all_profiles()


def _data(name: str) -> dict:
    return yaml.safe_load((paths.PARAMS / f"{name}.yaml").read_text())


CPU = _data("cpu-default")
V100 = _data("v100-32g-x1")
V100X2 = _data("v100-32g-x2-nvlink")


# ---------------------------------------------------------------- shipped profiles
def test_the_expected_profiles_ship():
    names = {p.stem for p in SHIPPED}
    assert {"cpu-default", "v100-32g-x1", "v100-32g-x2-nvlink", "rtx4060ti-16g", "rtx4090-24g", "h200-x1"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_validates(path: Path):
    prof = profiles.load(path)
    assert prof.name == path.stem
    assert profiles.load(path.stem) == prof  # by name too


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_is_commented(path: Path):
    """One flat, commented YAML per box that says why it differs."""
    text = path.read_text()
    assert text.lstrip().startswith("#")
    assert sum(line.lstrip().startswith("#") or " # " in line for line in text.splitlines()) >= 8


@pytest.mark.parametrize("path", [p for p in SHIPPED if not p.stem.startswith(("cpu-", "endpoint-"))], ids=lambda p: p.stem)
def test_gpu_profiles_use_an_architecture_the_lab_ships(path: Path):
    prof = profiles.load(path)
    assert prof.model_architecture.removeprefix("config:") in models.stand_in_ids()
    assert prof.gpu_count >= 1
    if prof.engine in ("llama.cpp", "llama-cpp-python"):
        assert prof.n_gpu_layers != 0  # a GPU profile that offloads nothing measures the CPU
    # the seeds' model where it fits; a profile that runs something else says what and why
    assert prof.model_architecture == "config:qwen3.8-27b" or (prof.model_stand_in_for and prof.model_stand_in_reason)


@pytest.mark.parametrize("name", ["v100-32g-x1", "v100-32g-x2-nvlink", "rtx4090-24g", "h200-x1", "rtx4060ti-16g"])
def test_gpu_profiles_plan_for_qwen38(name: str):
    prof = profiles.load(name)
    assert prof.model_architecture == "config:qwen3.8-27b"
    assert "not a published" not in (paths.PARAMS / f"{name}.yaml").read_text()


def test_v100_profiles_keep_volta_safe_choices():
    x1, x2 = profiles.load("v100-32g-x1"), profiles.load("v100-32g-x2-nvlink")
    for prof in (x1, x2):
        assert prof.gpu_compute_capability == "7.0"
        assert prof.cuda_toolkit.startswith("12.")          # CUDA 13 cannot build sm_70
        assert int(prof.driver_version.split(".")[0]) <= 580  # last branch for Volta
        assert prof.engine == "llama.cpp" and prof.model_quant == "Q4_K_M"
    # no official vLLM serves Qwen3.8-27B on Volta: llama.cpp across both cards (pipeline split)
    assert x2.gpu_count == 2 and x2.nvlink_expected and x2.n_gpu_layers == -1
    text = (paths.PARAMS / "v100-32g-x2-nvlink.yaml").read_text()
    assert "-sm layer -ts 1,1" in text and "SXM2" in text and "1Cat-vLLM" in text


# ---------------------------------------------------------------- malformed profiles
def _with(base: dict, **changes) -> dict:
    data = copy.deepcopy(base)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    return data


_DROP = object()

# (case id, profile content: a dict to dump or raw text, substrings the message must contain)
MALFORMED = [
    ("unknown_key", _with(CPU, colour="blue"), ["field 'colour'", "not a known setting", "'blue'"]),
    ("typo_key", _with(CPU, gpu_memory_utilisation=0.8),
     ["field 'gpu_memory_utilisation'", "0.8", "did you mean 'gpu_memory_utilization'"]),
    ("wrong_type", _with(CPU, gpu_count="two"), ["field 'gpu_count'", "'two'", "integer"]),
    ("wrong_type_bool", _with(V100X2, nvlink_expected="maybe"), ["field 'nvlink_expected'", "'maybe'", "boolean"]),
    ("negative_count", _with(CPU, gpu_count=-1), ["field 'gpu_count'", "-1", "greater than or equal to 0"]),
    ("negative_layers", _with(V100, n_gpu_layers=-2), ["field 'n_gpu_layers'", "-2", "greater than or equal to -1"]),
    ("bad_regex", _with(V100, gpu_name_pattern="V100[32GB"),
     ["field 'gpu_name_pattern'", "'V100[32GB'", "not a valid regular expression"]),
    ("cc_without_minor", _with(V100, gpu_compute_capability="7"), ["field 'gpu_compute_capability'", "'7'", "pattern"]),
    ("cc_as_sm", _with(V100, gpu_compute_capability="sm_70"), ["field 'gpu_compute_capability'", "'sm_70'"]),
    ("cc_as_number", _with(V100, gpu_compute_capability=7.0), ["field 'gpu_compute_capability'", "7.0", "string"]),
    ("tp_above_gpus", _with(V100X2, tensor_parallel_size=4), ["tensor_parallel_size 4 > gpu_count 2"]),
    ("gpu_fields_without_gpu", _with(CPU, gpu_vram_mib=32768, gpu_compute_capability="7.0"),
     ["gpu_count is 0", "gpu_vram_mib=32768", "gpu_compute_capability='7.0'"]),
    ("gpu_without_fields", _with(CPU, gpu_count=1),
     ["gpu_count is 1", "gpu_name_pattern", "gpu_vram_mib", "gpu_compute_capability"]),
    ("nvlink_one_gpu", _with(V100, nvlink_expected=True), ["nvlink_expected is true but gpu_count is 1"]),
    ("open_host_without_key", _with(CPU, host="0.0.0.0"), ["host '0.0.0.0'", "api_key_env"]),
    ("awq_on_llama_cpp", _with(V100, model_quant="AWQ-INT4"), ["'llama.cpp'", "model_quant 'AWQ-INT4'", "GGUF"]),
    ("unknown_quant", _with(V100, model_quant="Q4_K_XL"), ["field 'model_quant'", "'Q4_K_XL'", "unknown quant type"]),
    ("unknown_engine", _with(CPU, engine="ollama"), ["field 'engine'", "'ollama'", "'llama.cpp'"]),
    ("missing_required", _with(CPU, engine=_DROP), ["field 'engine'", "missing", "required"]),
    ("port_privileged", _with(CPU, port=80), ["field 'port'", "80", "1024"]),
    ("utilization_above_one", _with(V100X2, gpu_memory_utilization=1.5),
     ["field 'gpu_memory_utilization'", "1.5", "less than or equal to 1"]),
    ("stand_in_without_reason", _with(V100, model_stand_in_for="Qwen3.8-14B"), ["model_stand_in_reason"]),
    ("architecture_without_prefix", _with(V100, model_architecture="qwen3-32b"),
     ["field 'model_architecture'", "'qwen3-32b'", "config:"]),
    ("zero_concurrency", _with(CPU, bench_concurrency=[0, 2]), ["field 'bench_concurrency", "[0, 2]", "≥ 1"]),
    ("bad_driver", _with(V100, driver_version="535.x"), ["field 'driver_version'", "'535.x'"]),
    ("bad_wheel", _with(V100X2, torch_cuda_wheel="cuda126"), ["field 'torch_cuda_wheel'", "'cuda126'"]),
    ("unquoted_version", _with(V100X2, engine_version=0.10), ["field 'engine_version'", "0.1", "string"]),
    ("uppercase_name", _with(CPU, name="CPU-Default"), ["field 'name'", "'CPU-Default'"]),
    ("bad_kv_dtype", _with(CPU, kv_cache_dtype="int8"), ["field 'kv_cache_dtype'", "'int8'"]),
    ("lowercase_key_env", _with(CPU, api_key_env="my_key"), ["field 'api_key_env'", "'my_key'"]),
    ("two_problems", _with(CPU, gpu_count="two", port=80), ["2 problem(s)", "field 'gpu_count'", "field 'port'"]),
    ("non_mapping", "- name: cpu-default\n- gpu_count: 0\n", ["expected a mapping", "list"]),
    ("scalar", "just words\n", ["expected a mapping", "str"]),
    ("empty_file", "", ["empty file"]),
    ("invalid_yaml", "name: [cpu-default\ngpu_count: 0\n", ["not valid YAML"]),
    ("tab_indent", "name: x\n\tgpu_count: 0\n", ["not valid YAML"]),
]


def _write(tmp_path: Path, content, stem: str = "bad-profile") -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False, allow_unicode=True))
    return path


def test_there_are_enough_malformed_cases():
    assert len(MALFORMED) >= 20


@pytest.mark.parametrize("content,expected", [(c, e) for _, c, e in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_profile_names_file_field_and_value(tmp_path, content, expected):
    path = _write(tmp_path, content)
    with pytest.raises(ProfileError) as info:
        profiles.load(path)
    message = str(info.value)
    assert str(path) in message
    for part in expected:
        assert part in message, f"{part!r} not in:\n{message}"


def test_name_must_match_file_stem_in_the_params_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "PARAMS", tmp_path)
    path = _write(tmp_path, CPU, stem="my-box")
    with pytest.raises(ProfileError) as info:
        profiles.load(path)
    message = str(info.value)
    assert str(path) in message and "field 'name'" in message
    assert "'cpu-default'" in message and "'my-box'" in message
    with pytest.raises(ProfileError):  # by name too
        profiles.load("my-box")


def test_a_copy_outside_params_may_keep_its_name(tmp_path):
    assert profiles.load(_write(tmp_path, V100, stem="my-v100")).name == "v100-32g-x1"


def test_unknown_profile_name_lists_the_known_ones():
    with pytest.raises(ProfileError) as info:
        profiles.load("v100-32g-x3")
    assert "'v100-32g-x3'" in str(info.value) and "v100-32g-x1" in str(info.value)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ProfileError) as info:
        profiles.load(missing)
    assert str(missing) in str(info.value) and "no such file" in str(info.value)


def test_variants_of_valid_profiles_stay_valid(tmp_path):
    """The bases above are valid, so each malformed case fails for its own reason only."""
    for stem, data in (("a", CPU), ("b", V100), ("c", V100X2)):
        profiles.load(_write(tmp_path, data, stem=stem))
