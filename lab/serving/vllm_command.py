"""The vLLM server command of a profile (lab.serving.engines.build_command's vLLM builder): the entry point by version
(`vllm serve` vs the old module path), the profile's fields as flags by lab/data/flag_table.yaml (dtype and KV type
by compute capability, parallelism, --max-num-seqs), the environment, each flag with its note from
lab/data/engine_rules.yaml."""
from __future__ import annotations

import sys
from pathlib import Path

from lab.core import paths
from lab.core.profiles import Profile
from lab.core.versions import at_least, compute_capability
from lab.serving import flag_table
from lab.serving.command import (Command, Note, host_notes, model_arg, note, cuda_env, engine_python_path,
                                 rule)


def _vllm_entry(profile: Profile, version: str, model: str) -> tuple[list[str], Note]:
    python = engine_python_path(profile)
    if at_least(version, rule("vllm-serve-cli")["since"]):
        exe = str(Path(python).parent / "vllm") if python else "vllm"
        return [exe, "serve", model], note("vllm-serve-cli", "vllm serve")
    return ([python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model],
            note("vllm-serve-cli", "-m vllm.entrypoints.openai.api_server", prefix=f"vLLM {version} predates `vllm serve`."))


def _vllm_model(profile: Profile, model_path) -> tuple[str, list[Note]]:
    """What vLLM serves: an explicit path, else the profile's HF-format model_dir (the embedded GGUF's
    converted copy for cpu-vllm), else model_file / the Hugging Face id (see `model_arg`)."""
    if model_path is not None or not profile.model_dir:
        return model_arg(profile, model_path)
    try:
        return str(paths.served_model_path(profile)), [note("vllm-model-dir", "MODEL")]
    except paths.VllmMissing as exc:
        return profile.model_dir, [note("vllm-model-dir", "MODEL", "warn", prefix=f"Not on this machine ({exc}).")]


def _vllm_env(profile: Profile) -> tuple[dict[str, str], list[Note]]:
    """Environment variables of the vLLM process (lab.serving.vllm_env.engine_env), each with its reason."""
    from lab.serving import vllm_env

    env = vllm_env.engine_env(profile)
    ids = {"VLLM_TARGET_DEVICE": "vllm-cpu-target-device", "VLLM_CPU_KVCACHE_SPACE": "vllm-cpu-kvcache-space"}
    return env, [note(ids[k], k) for k in env if k in ids]


def fork_flags(profile: Profile) -> tuple[list[str], list[Note]]:
    """The Volta fork's own flags (lab/data/routes.yaml fork serve_flags, quantization_flag) for a profile with
    engine_build 1cat-vllm==VERSION; nothing for stock vLLM."""
    if not profile.engine_build:
        return [], []
    from lab.core import facts

    fork = facts.load("routes")["fork"]
    argv = list(fork["serve_flags"])
    quant = fork["quantization_flag"].get(profile.model_quant)
    if quant:
        argv += ["--quantization", quant]
    src = f"lab/data/routes.yaml fork ({fork['repository']}, serve_tp2)"
    return argv, [Note(" ".join(argv), f"{profile.engine_build} ({fork['name']}, the community Volta fork of vLLM): "
                                       "its V100 attention backend, its batched-token cap, and the quantization its "
                                       "TurboMind SM70 kernels serve, as its README's TP2 command", src)]


def _vllm_version_notes(profile: Profile, version: str, cc: tuple[int, int] | None) -> list[Note]:
    notes = []
    if profile.engine_build:  # the fork's kernels are SM70's own: stock vLLM's capability notes do not apply
        return [note("vllm-swap-space", "--swap-space", prefix="Not passed.")]
    if at_least(version, rule("vllm-log-requests")["since"]):
        notes.append(note("vllm-log-requests", "--disable-log-requests", prefix="Not passed."))
    notes.append(note("vllm-swap-space", "--swap-space", prefix="Not passed."))
    if profile.model_quant == "AWQ-INT4" and cc and cc < (7, 5):
        notes.append(note("vllm-awq-capability", "AWQ", "error"))
    elif profile.model_quant in ("AWQ-INT4", "GPTQ-INT4", "GPTQ-INT8"):
        notes.append(note("vllm-quantization", "--quantization"))
    if cc and cc < (7, 5) and at_least(version, rule("vllm-volta-wheels")["since"]):
        notes.append(note("vllm-volta-wheels", "", "warn"))
    return notes


def build(profile: Profile, host: str, port: int, model_path, installed, cc_value) -> Command:
    """vLLM: the profile's fields as flags by lab/data/flag_table.yaml (its "serve" part after --port, its "batch"
    part after --kv-cache-dtype), around the flags no profile field sets (entry point, --served-model-name, --host,
    --port, --disable-log-requests before 0.10.1)."""
    version = installed or profile.engine_version
    cc = compute_capability(cc_value)
    model, notes = _vllm_model(profile, model_path)
    argv, entry_note = _vllm_entry(profile, version, model)
    env, env_notes = _vllm_env(profile)
    notes = [entry_note, *notes, *env_notes]
    gpu_env, gpu_notes = cuda_env(profile)
    served = flag_table.flags(profile, "vllm", version=version, cc=cc)
    batch = flag_table.flags(profile, "vllm", "batch", version=version, cc=cc)
    extra, extra_notes = fork_flags(profile)
    argv += ["--served-model-name", profile.model_name, "--host", host, "--port", str(port), *served.argv, *batch.argv,
             *extra]
    notes += extra_notes
    env = {**env, **gpu_env, **served.env, **batch.env}
    notes += [note("vllm-served-name", "--served-model-name"), *host_notes(profile, host, "vllm-host"),
              *gpu_notes, *served.notes, *batch.notes]
    if not at_least(version, rule("vllm-log-requests")["since"]):
        argv.append("--disable-log-requests")
        notes.append(note("vllm-log-requests", "--disable-log-requests"))
    notes += _vllm_version_notes(profile, version, cc)
    secret = {"VLLM_API_KEY": profile.api_key_env} if profile.api_key_env else {}
    if secret:
        notes.append(note("vllm-api-key", "VLLM_API_KEY"))
    return Command("vllm", tuple(argv), host, port, "/health", profile.model_name, tuple(notes), env=env,
                   secret_env=secret, api_key_env=profile.api_key_env, engine_version=version,
                   version_source="installed" if installed else "declared")
