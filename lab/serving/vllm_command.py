"""The vLLM server command of a profile (lab.serving.engines.build_command's vLLM builder): the entry point by version
(`vllm serve` vs the old module path), dtype and KV type by compute capability, parallelism, the environment, each
flag with its note from lab/data/engine_rules.yaml."""
from __future__ import annotations

import sys
from pathlib import Path

from lab.core import paths
from lab.core.profiles import Profile
from lab.core.versions import at_least, compute_capability
from lab.serving.command import (Command, Note, _host_notes, _model_arg, _note, cuda_env, engine_python_path,
                                 rule)


def _vllm_entry(profile: Profile, version: str, model: str) -> tuple[list[str], Note]:
    python = engine_python_path(profile)
    if at_least(version, rule("vllm-serve-cli")["since"]):
        exe = str(Path(python).parent / "vllm") if python else "vllm"
        return [exe, "serve", model], _note("vllm-serve-cli", "vllm serve")
    return ([python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model],
            _note("vllm-serve-cli", "-m vllm.entrypoints.openai.api_server", prefix=f"vLLM {version} predates `vllm serve`."))


def _vllm_model(profile: Profile, model_path) -> tuple[str, list[Note]]:
    """What vLLM serves: an explicit path, else the profile's HF-format model_dir (the embedded GGUF's
    converted copy for cpu-vllm), else model_file / the Hugging Face id (see `_model_arg`)."""
    if model_path is not None or not profile.model_dir:
        return _model_arg(profile, model_path)
    try:
        return str(paths.served_model_path(profile)), [_note("vllm-model-dir", "MODEL")]
    except paths.VllmMissing as exc:
        return profile.model_dir, [_note("vllm-model-dir", "MODEL", "warn", prefix=f"Not on this machine ({exc}).")]


def _vllm_env(profile: Profile) -> tuple[dict[str, str], list[Note]]:
    """Environment variables of the vLLM process (lab.serving.vllm_env.engine_env), each with its reason."""
    from lab.serving import vllm_env

    env = vllm_env.engine_env(profile)
    ids = {"VLLM_TARGET_DEVICE": "vllm-cpu-target-device", "VLLM_CPU_KVCACHE_SPACE": "vllm-cpu-kvcache-space"}
    return env, [_note(ids[k], k) for k in env if k in ids]


def _vllm_dtype(profile: Profile, cc: tuple[int, int] | None) -> tuple[list[str], list[Note]]:
    if profile.dtype != "auto":
        if profile.dtype == "bfloat16" and cc and cc < (8, 0):
            return ["--dtype", "bfloat16"], [_note("vllm-dtype-half", "--dtype", "error")]
        return ["--dtype", profile.dtype], []
    if cc and cc < (8, 0):
        return ["--dtype", "half"], [_note("vllm-dtype-half", "--dtype half")]
    return [], []


def _vllm_kv(profile: Profile, version: str, cc: tuple[int, int] | None) -> tuple[list[str], list[Note]]:
    kv = profile.kv_cache_dtype
    if kv in ("f16", "bf16", "auto"):
        return [], [_note("vllm-kv-dtype-map", "--kv-cache-dtype")]
    if kv in ("q8_0", "q4_0"):
        return [], [_note("vllm-kv-dtype-map", "--kv-cache-dtype", "error")]
    if cc and cc < (8, 9) and at_least(version, rule("vllm-swap-space")["since"]):
        return ["--kv-cache-dtype", kv], [_note("vllm-fp8-kv", "--kv-cache-dtype", "error")]
    return ["--kv-cache-dtype", kv], [_note("vllm-kv-dtype-map", "--kv-cache-dtype")]


def _vllm_version_notes(profile: Profile, version: str, cc: tuple[int, int] | None) -> list[Note]:
    notes = []
    if at_least(version, rule("vllm-log-requests")["since"]):
        notes.append(_note("vllm-log-requests", "--disable-log-requests", prefix="Not passed."))
    notes.append(_note("vllm-swap-space", "--swap-space", prefix="Not passed."))
    if profile.model_quant == "AWQ-INT4" and cc and cc < (7, 5):
        notes.append(_note("vllm-awq-capability", "AWQ", "error"))
    elif profile.model_quant in ("AWQ-INT4", "GPTQ-INT4", "GPTQ-INT8"):
        notes.append(_note("vllm-quantization", "--quantization"))
    if cc and cc < (7, 5) and at_least(version, rule("vllm-volta-wheels")["since"]):
        notes.append(_note("vllm-volta-wheels", "", "warn"))
    return notes


def build(profile: Profile, host: str, port: int, model_path, installed, cc_value) -> Command:
    version = installed or profile.engine_version
    cc = compute_capability(cc_value)
    model, notes = _vllm_model(profile, model_path)
    argv, entry_note = _vllm_entry(profile, version, model)
    env, env_notes = _vllm_env(profile)
    notes = [entry_note, *notes, *env_notes]
    argv += ["--served-model-name", profile.model_name, "--host", host, "--port", str(port),
             "--max-model-len", str(profile.context_tokens),
             "--gpu-memory-utilization", str(profile.gpu_memory_utilization)]
    notes += [_note("vllm-served-name", "--served-model-name"), *_host_notes(profile, host, "vllm-host"),
              _note("vllm-max-model-len", "--max-model-len"), _note("vllm-gpu-mem", "--gpu-memory-utilization")]
    if profile.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(profile.tensor_parallel_size)]
        notes.append(_note("vllm-tp", "--tensor-parallel-size"))
    if profile.pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(profile.pipeline_parallel_size)]
        notes.append(_note("vllm-pipeline-parallel", "--pipeline-parallel-size"))
    gpu_env, gpu_notes = cuda_env(profile)
    env = {**env, **gpu_env}
    notes += gpu_notes
    if profile.nccl_p2p_disable:
        env["NCCL_P2P_DISABLE"] = "1"
        argv.append("--disable-custom-all-reduce")
        notes += [_note("nccl-p2p-disable", "NCCL_P2P_DISABLE"),
                  _note("vllm-disable-custom-all-reduce", "--disable-custom-all-reduce")]
    for extra, extra_notes in (_vllm_dtype(profile, cc), _vllm_kv(profile, version, cc)):
        argv += extra
        notes += extra_notes
    if profile.parallel_slots > 1:
        argv += ["--max-num-seqs", str(profile.parallel_slots)]
        notes.append(_note("vllm-max-num-seqs", "--max-num-seqs"))
    if profile.enforce_eager:
        argv.append("--enforce-eager")
        notes.append(_note("vllm-enforce-eager", "--enforce-eager"))
    if not at_least(version, rule("vllm-log-requests")["since"]):
        argv.append("--disable-log-requests")
        notes.append(_note("vllm-log-requests", "--disable-log-requests"))
    notes += _vllm_version_notes(profile, version, cc)
    secret = {"VLLM_API_KEY": profile.api_key_env} if profile.api_key_env else {}
    if secret:
        notes.append(_note("vllm-api-key", "VLLM_API_KEY"))
    return Command("vllm", tuple(argv), host, port, "/health", profile.model_name, tuple(notes), env=env,
                   secret_env=secret, api_key_env=profile.api_key_env, engine_version=version,
                   version_source="installed" if installed else "declared")
