"""The exact command that serves a profile's model, why each flag is there, and what the server
reported about itself once it started.

`build_command(profile)` is pure apart from looking up where set-up put the llama.cpp tools and the
embedded model: it returns a `Command` whose every flag carries a `Note(flag, text, source)` taken
from lab/data/engine_rules.yaml. vLLM flags are chosen by version (the installed one when known, else
the profile's `engine_version`): `vllm serve` vs the old module path, `--disable-log-requests` vs
nothing, no `--swap-space`, `--dtype half` below compute capability 8.0.

The seeds' commands are data (lab/data/seed_commands.yaml); `correct_seed_command()` rewrites one for
a vLLM version and GPU, explaining each change. The `parse_*_log` functions read the start-up lines a
server prints (layers offloaded, KV cache size, slots, context, build) into plain dicts.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lab.core import facts, paths
from lab.core.profiles import Profile
from lab.core.versions import at_least, version_tuple

Level = Literal["info", "warn", "error"]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# llama.cpp's log verbosity that shows model/KV/slot set-up without per-token debug lines.
LLAMA_LOG_VERBOSITY = 4
# ggml type ids that llama-cpp-python's --type_k/--type_v take (llama_cpp/llama_cpp.py GGML_TYPE_*).
_GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}


# ---------------------------------------------------------------- data shapes
@dataclass(frozen=True)
class Note:
    """Why a flag is (or is not) in the command. `flag` is "" for the command as a whole."""

    flag: str
    text: str
    source: str
    level: Level = "info"


@dataclass(frozen=True)
class Command:
    """A server command: argv to run, environment to add, and how to reach the server once up.

    `secret_env` maps a variable the server reads (e.g. LLAMA_API_KEY) to the name of the user's
    variable that holds the key (the profile's api_key_env): the value is looked up only when the
    process starts, so it is never part of argv, a record or a notebook output.
    """

    engine: str
    argv: tuple[str, ...]
    host: str
    port: int
    health_path: str
    served_model: str | None
    notes: tuple[Note, ...]
    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    engine_version: str | None = None
    version_source: str = "n/a"  # installed | declared | n/a
    serialises_requests: bool = False
    external: bool = False
    url: str | None = None  # an endpoint profile's server root (profile.endpoint_base): used as is

    @property
    def base_url(self) -> str:
        """Where a client on this machine reaches the server (0.0.0.0 is reached via 127.0.0.1)."""
        if self.url:
            return self.url
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    @property
    def problems(self) -> list[Note]:
        """Notes of level `error`: the command will not work as built (e.g. AWQ on a V100)."""
        return [n for n in self.notes if n.level == "error"]

    def shell(self, multiline: bool = True) -> str:
        """The command as a user would type it; keys appear as "$VAR", never as values."""
        if self.external:
            return f"# external server: nothing to start; the lab connects to {self.base_url}"
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        words += [f'{k}="${src}"' for k, src in self.secret_env.items()]
        words += [shlex.quote(a) for a in self.argv]
        if not multiline:
            return " ".join(words)
        lines, current = [], []
        for w in words:
            if w.startswith("-") and current:
                lines.append(" ".join(current))
                current = []
            current.append(w)
        lines.append(" ".join(current))
        return " \\\n    ".join(lines)

    def notes_rows(self) -> list[dict]:
        """The notes as table rows (flag, level, why, source) for a notebook or a record."""
        return [{"flag": n.flag or "(command)", "level": n.level, "why": n.text, "source": n.source}
                for n in self.notes]

    def to_record(self) -> dict:
        """What a record keeps of the command: argv, the shell form, versions and the notes."""
        return {"engine": self.engine, "argv": list(self.argv), "shell": self.shell(multiline=False),
                "env": dict(self.env), "secret_env_names": dict(self.secret_env), "host": self.host,
                "port": self.port, "base_url": self.base_url, "health_path": self.health_path,
                "served_model": self.served_model, "engine_version": self.engine_version,
                "version_source": self.version_source, "serialises_requests": self.serialises_requests,
                "external": self.external, "notes": self.notes_rows()}


# ---------------------------------------------------------------- versions and rules
def rule(rule_id: str) -> dict:
    """One entry of lab/data/engine_rules.yaml (text, source, and since/until for vLLM rules)."""
    for entry in facts.load("engine_rules", "rules")["rules"]:
        if entry["id"] == rule_id:
            return entry
    raise KeyError(f"lab/data/engine_rules.yaml has no rule {rule_id!r}")


def _note(rule_id: str, flag: str = "", level: Level = "info", prefix: str = "") -> Note:
    r = rule(rule_id)
    text = f"{prefix} {r['text']}".strip() if prefix else r["text"]
    return Note(flag, text, r["source"], level)


def _cc(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    major, _, minor = str(value).partition(".")
    return int(major), int(minor or 0)


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
                "vllm": _vllm, "external": _external}
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


def _replace(cmd: Command, **changes) -> Command:
    from dataclasses import replace

    return replace(cmd, **changes)


def _model_arg(profile: Profile, model_path: str | Path | None) -> tuple[str, list[Note]]:
    if model_path is not None:
        return str(model_path), []
    if not profile.model_file:
        if profile.engine == "vllm":
            return profile.model_name, []  # a Hugging Face id or a local folder
        return "MODEL.gguf", [Note("-m", f"profile {profile.name} sets no model_file: give a GGUF path",
                                   "profile schema (lab/core/profiles.py)", "error")]
    try:
        return str(paths.model_path(profile.model_file)), []
    except (paths.SetupMissing, KeyError) as exc:
        return profile.model_file, [Note("-m", f"model file not found on this machine ({exc})",
                                         "lab/core/paths.py", "warn")]


def _host_notes(profile: Profile, host: str, rule_id: str) -> list[Note]:
    if host in LOOPBACK:
        return [_note(rule_id, "--host")]
    level: Level = "info" if profile.api_key_env else "error"
    return [_note(rule_id, "--host", level,
                  prefix=f"host {host} exposes the server to the network (key from ${profile.api_key_env}).")]


def _llama_server(profile: Profile, host: str, port: int, model_path, _installed, _cc_value) -> Command:
    notes: list[Note] = []
    try:
        binary = str(paths.tool("llama-server"))
        notes.append(_note("llama-server", "llama-server"))
    except paths.SetupMissing as exc:
        binary = "llama-server"
        notes.append(_note("llama-server", "llama-server", "warn", prefix=f"Not built on this machine ({exc})."))
    model, model_notes = _model_arg(profile, model_path)
    notes += [_note("llama-model", "-m"), *model_notes]
    kv = profile.kv_cache_dtype
    if kv in ("auto",):
        kv = "f16"
    if kv not in ("f16", "bf16", "q8_0", "q4_0"):
        notes.append(_note("llama-kv-type", "-ctk/-ctv", "error", prefix=f"kv_cache_dtype {kv} is not a llama.cpp type."))
    fa = "on" if kv in ("q8_0", "q4_0") or profile.split_mode == "tensor" else "auto"
    ngl = "999" if profile.n_gpu_layers == -1 else str(profile.n_gpu_layers)
    argv = [binary, "-m", model, "-c", str(profile.context_tokens), "-np", str(profile.parallel_slots),
            "-t", str(profile.threads), "-ngl", ngl, "-ctk", kv, "-ctv", kv, "-fa", fa,
            "--host", host, "--port", str(port), "--cors-origins", "localhost", "--no-cors-credentials",
            "-lv", str(LLAMA_LOG_VERBOSITY)]
    gpu_argv, env, gpu_notes = llama_gpu_settings(profile)
    argv += gpu_argv
    notes += gpu_notes
    notes += [_note("llama-ctx", "-c"), _note("llama-np", "-np"), _note("llama-threads", "-t"),
              _note("llama-ngl", "-ngl"), _note("llama-kv-type", "-ctk/-ctv"), _note("llama-fa", "-fa"),
              *_host_notes(profile, host, "llama-host"), _note("llama-cors", "--cors-origins"),
              _note("llama-verbosity", "-lv")]
    secret = {}
    if profile.api_key_env:
        secret["LLAMA_API_KEY"] = profile.api_key_env
        notes.append(_note("llama-api-key", "LLAMA_API_KEY"))
    return Command("llama.cpp", tuple(argv), host, port, "/health", profile.model_name, tuple(notes), env=env,
                   secret_env=secret, api_key_env=profile.api_key_env,
                   engine_version=_installed or profile.engine_version,
                   version_source="installed" if _installed else "declared")


def cuda_env(profile: Profile) -> tuple[dict[str, str], list[Note]]:
    """CUDA_DEVICE_ORDER / CUDA_VISIBLE_DEVICES for a profile with several GPUs (or an explicit GPU list):
    the engine then numbers the cards as nvidia-smi does."""
    env, notes = {}, []
    if profile.gpu_count > 1 or profile.cuda_visible_devices:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        notes.append(_note("cuda-device-order", "CUDA_DEVICE_ORDER"))
    if profile.cuda_visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = profile.cuda_visible_devices
        notes.append(_note("cuda-visible-devices", "CUDA_VISIBLE_DEVICES"))
    return env, notes


def llama_gpu_settings(profile: Profile) -> tuple[list[str], dict[str, str], list[Note]]:
    """llama.cpp's multi-GPU flags (-sm, -ts, -mg) and CUDA environment for a profile, with their notes.
    Shared by llama-server (build_command) and llama-bench (lab.measure.multigpu), so both place the model alike."""
    argv: list[str] = []
    env, notes = cuda_env(profile)
    if profile.split_mode:
        argv += ["-sm", profile.split_mode]
        notes.append(_note("llama-split-mode", "-sm"))
        if profile.split_mode == "tensor":
            notes.append(_note("llama-split-tensor", "-sm tensor"))
    if profile.tensor_split:
        # "/" between GPUs: llama-server splits on "," or "/", llama-bench on "/" only (its "," separates
        # values to test), so one spelling serves both (tools/llama-bench/llama-bench.cpp, common/arg.cpp)
        argv += ["-ts", "/".join(f"{x:g}" for x in profile.tensor_split)]
        notes.append(_note("llama-tensor-split", "-ts"))
    if profile.main_gpu is not None:
        argv += ["-mg", str(profile.main_gpu)]
        notes.append(_note("llama-main-gpu", "-mg"))
    return argv, env, notes


def _llama_cpp_python(profile: Profile, host: str, port: int, model_path, installed, _cc_value) -> Command:
    python = profile.engine_python or sys.executable
    model, notes = _model_arg(profile, model_path)
    notes = [_note("lcp-server", "llama_cpp.server", "warn"), *notes]
    ngl = "-1" if profile.n_gpu_layers == -1 else str(profile.n_gpu_layers)
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", profile.model_name,
            "--n_ctx", str(profile.context_tokens), "--n_threads", str(profile.threads),
            "--n_gpu_layers", ngl, "--interrupt_requests", "false", "--host", host, "--port", str(port)]
    notes += [_note("lcp-threads", "--n_threads"), _note("lcp-interrupt", "--interrupt_requests"),
              *_host_notes(profile, host, "llama-host"), _note("lcp-health", "/v1/models")]
    kv = "f16" if profile.kv_cache_dtype == "auto" else profile.kv_cache_dtype
    if kv not in _GGML_TYPE_IDS:
        notes.append(_note("llama-kv-type", "--type_k/--type_v", "error",
                           prefix=f"kv_cache_dtype {kv} is not available in llama_cpp.server (f16, q8_0, q4_0)."))
    elif kv != "f16":
        argv += ["--type_k", str(_GGML_TYPE_IDS[kv]), "--type_v", str(_GGML_TYPE_IDS[kv]), "--flash_attn", "true"]
        notes.append(_note("llama-kv-type", "--type_k/--type_v/--flash_attn"))
    if profile.parallel_slots > 1:
        notes.append(_note("lcp-slots", "parallel_slots", "warn"))
    secret = {"API_KEY": profile.api_key_env} if profile.api_key_env else {}
    if secret:
        notes.append(_note("lcp-api-key", "API_KEY"))
    return Command("llama-cpp-python", tuple(argv), host, port, "/v1/models", profile.model_name, tuple(notes),
                   secret_env=secret, api_key_env=profile.api_key_env,
                   engine_version=installed or profile.engine_version,
                   version_source="installed" if installed else "declared", serialises_requests=True)


def engine_python_path(profile: Profile) -> str | None:
    """The profile's engine_python as the path to run: a relative one (".venv-vllm/bin/python") is
    relative to the checkout, not to whatever folder the caller runs in (a notebook runs in notebooks/).
    Kept as written when it does not exist here, or when the venv here is another build (the CPU
    vLLM of cpu-vllm is not the vLLM a GPU profile plans for): then it names the venv to make there."""
    if not profile.engine_python:
        return None
    path = Path(profile.engine_python).expanduser()
    if not path.is_absolute() and (paths.ROOT / path).exists() and _venv_fits(profile, paths.ROOT / path):
        return str(paths.ROOT / path)
    return str(path)


def _venv_fits(profile: Profile, python: Path) -> bool:
    """Whether the engine venv holding `python` was built for this kind of profile: set-up records in
    <venv>/lab-vllm.json whether it installed vLLM's CPU build or the CUDA one (lab/setup/vllm.py)."""
    info = python.parent.parent / "lab-vllm.json"
    if profile.engine != "vllm" or not info.exists():
        return True
    import json

    try:
        device = json.loads(info.read_text()).get("device")
    except (OSError, ValueError):
        return True
    return device is None or (device == "cpu") == (profile.gpu_count == 0)


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


def _vllm(profile: Profile, host: str, port: int, model_path, installed, cc_value) -> Command:
    version = installed or profile.engine_version
    cc = _cc(cc_value)
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


def _external(profile: Profile, host: str, port: int, _model_path, installed, _cc_value) -> Command:
    notes = [_note("external")]
    return Command("external", (), host, port, "/v1/models", None, tuple(notes),
                   api_key_env=profile.api_key_env, engine_version=installed or profile.engine_version,
                   version_source="declared", external=True)


def _endpoint(profile: Profile) -> Command:
    """An endpoint profile: its URL, served model and key variable; host/port only for display."""
    from urllib.parse import urlsplit

    parts = urlsplit(profile.endpoint_base)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Command(profile.engine, (), parts.hostname or "", port, "/v1/models", profile.served_model,
                   (_note("external"),), api_key_env=profile.api_key_env, engine_version=profile.engine_version,
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
    if not Path(python).exists() or not _venv_fits(profile, Path(python)):
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


# ---------------------------------------------------------------- the seeds' commands
@dataclass(frozen=True)
class Change:
    """One edit to a seed command. action: replace | remove | add | blocker (no flag fixes it) | check."""

    action: str
    before: str
    after: str
    why: str
    source: str


@dataclass(frozen=True)
class SeedCorrection:
    command_id: str
    seed_file: str
    section: str
    engine: str
    kind: str
    target: str
    original: tuple[str, ...]
    corrected: tuple[str, ...]
    changes: tuple[Change, ...]
    label: str = ""  # e.g. "as the seed ran it", "this profile's vLLM", "newest vLLM run here"

    @property
    def blockers(self) -> list[Change]:
        return [c for c in self.changes if c.action == "blocker"]

    def rows(self) -> list[dict]:
        return [{"action": c.action, "before": c.before, "after": c.after, "why": c.why, "source": c.source}
                for c in self.changes]

    @property
    def runs(self) -> bool:
        """Whether the corrected command can work as written (no blocker, no open check)."""
        return not any(c.action in ("blocker", "check") for c in self.changes)

    def to_record(self) -> dict:
        return {"command_id": self.command_id, "seed_file": self.seed_file, "section": self.section,
                "engine": self.engine, "kind": self.kind, "target": self.target, "label": self.label,
                "runs": self.runs,
                "original": " ".join(shlex.quote(a) for a in self.original),
                "corrected": " ".join(shlex.quote(a) for a in self.corrected), "changes": self.rows()}


def seed_commands() -> list[dict]:
    """The seeds' commands as data (lab/data/seed_commands.yaml)."""
    return list(facts.load("seed_commands", "commands")["commands"])


def _seed_entry(command_id: str) -> dict:
    for entry in seed_commands():
        if entry["id"] == command_id:
            return entry
    known = ", ".join(e["id"] for e in seed_commands())
    raise KeyError(f"no seed command {command_id!r}; known: {known}")


def _change(action: str, before: str, after: str, rule_id: str, prefix: str = "") -> Change:
    r = rule(rule_id)
    return Change(action, before, after, f"{prefix} {r['text']}".strip(), r["source"])


_VLLM_BOOL_FLAGS = {"--disable-log-requests", "--enable-log-requests", "--enforce-eager", "--trust-remote-code"}


def _split_options(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """argv → (entry-point words, [[flag, value?], ...])."""
    i = next((k for k, a in enumerate(argv) if a.startswith("--")), len(argv))
    entry, opts, rest = argv[:i], [], argv[i:]
    while rest:
        flag = rest.pop(0)
        if flag in _VLLM_BOOL_FLAGS or not rest or rest[0].startswith("--"):
            opts.append([flag])
        else:
            opts.append([flag, rest.pop(0)])
    return entry, opts


@dataclass(frozen=True)
class Route:
    """What a working equivalent swaps in where the seed's choice cannot run: a GPTQ 4-bit checkpoint for
    AWQ on a GPU below compute capability 7.5, a --max-model-len within the model's own maximum, and the
    llama.cpp command as the other Volta-safe route."""

    gptq_model: str
    max_model_len: int | None = None
    llama_command: str | None = None


def correct_seed_command(command_id: str, vllm_version: str | None = None,
                         compute_capability: str | None = None, route: Route | None = None,
                         label: str = "") -> SeedCorrection:
    """The seed's command rewritten to work (and be safe) with `vllm_version` on a GPU of
    `compute_capability` (both default to what the seed itself used), each change explained.
    Without a `route`, what no flag fixes stays a `blocker`; with one, AWQ on Volta becomes the GPTQ
    checkpoint it names (and the llama.cpp route is listed as the alternative)."""
    entry = _seed_entry(command_id)
    cc_value = compute_capability or entry.get("compute_capability")
    if entry["engine"] == "vllm":
        version = vllm_version or entry["engine_version"]
        corrected, changes = _correct_vllm(list(entry["argv"]), version, _cc(cc_value), route,
                                           entry.get("model_family"))
        target = f"vLLM {version}" + (f" on compute capability {cc_value}" if cc_value else "")
    else:
        corrected, changes = _correct_llama(list(entry["argv"]))
        target = "llama.cpp built by `make setup` (binaries named since PR #7809)"
    return SeedCorrection(command_id, entry["seed"], entry["section"], entry["engine"], entry["kind"], target,
                          tuple(entry["argv"]), tuple(corrected), tuple(changes), label)


def _option_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def _apply_route(argv: list[str], cc: tuple[int, int] | None, route: Route | None) -> tuple[list[str], list[Change]]:
    """The route's swaps on the seed's argv (before any version change): AWQ → GPTQ, max-model-len."""
    if route is None:
        return argv, []
    argv, changes = list(argv), []
    if _option_value(argv, "--quantization") == "awq" and cc and cc < (7, 5):
        old_model = _option_value(argv, "--model")
        argv[argv.index("--model") + 1] = route.gptq_model
        argv[argv.index("--quantization") + 1] = "gptq"
        changes.append(_change("replace", f"--model {old_model} --quantization awq",
                               f"--model {route.gptq_model} --quantization gptq", "vllm-awq-to-gptq"))
        if route.llama_command:
            changes.append(_change("alternative", "", route.llama_command, "volta-llamacpp-route"))
    seed_len = _option_value(argv, "--max-model-len")
    if route.max_model_len and seed_len and int(seed_len) > route.max_model_len:
        argv[argv.index("--max-model-len") + 1] = str(route.max_model_len)
        changes.append(_change("replace", f"--max-model-len {seed_len}", f"--max-model-len {route.max_model_len}",
                               "vllm-max-model-len-native"))
    return argv, changes


def _correct_vllm(argv: list[str], version: str, cc: tuple[int, int] | None,
                  route: Route | None = None, model_family: str | None = None) -> tuple[list[str], list[Change]]:
    argv, changes = _apply_route(argv, cc, route)
    qwen3 = rule("vllm-qwen3-support")
    if model_family == "qwen3" and not at_least(version, qwen3["since"]):
        model = _option_value(argv, "--model") or "MODEL"
        changes.append(_change("blocker", f"--model {model}", f"--model {model}", "vllm-qwen3-support",
                               f"vLLM {version}:"))
    entry, opts = _split_options(argv)
    flags = {o[0]: o for o in opts}
    if at_least(version, rule("vllm-serve-cli")["since"]) and "-m" in entry:
        model = flags.pop("--model", ["--model", "MODEL"])[1]
        changes.append(_change("replace", " ".join(entry + ["--model", model]), f"vllm serve {model}", "vllm-serve-cli"))
        entry = ["vllm", "serve", model]
    opts = list(flags.values())
    log_rule, swap_rule = rule("vllm-log-requests"), rule("vllm-swap-space")
    kept = []
    for opt in opts:
        flag, shown = opt[0], " ".join(opt)
        if flag == "--disable-log-requests" and at_least(version, log_rule["since"]):
            fails = at_least(version, log_rule["until"])
            changes.append(_change("remove", shown, "", "vllm-log-requests",
                                   f"vLLM {version}: {'rejected' if fails else 'deprecated; logging is already off'}."))
        elif flag == "--swap-space" and at_least(version, swap_rule["since"]):
            fails = at_least(version, swap_rule["until"])
            changes.append(_change("remove", shown, "", "vllm-swap-space",
                                   f"vLLM {version}: {'rejected' if fails else 'does nothing'}."))
        elif flag == "--dtype" and opt[1] == "bfloat16" and cc and cc < (8, 0):
            changes.append(_change("replace", shown, "--dtype half", "vllm-dtype-half"))
            kept.append(["--dtype", "half"])
        elif flag == "--quantization" and opt[1] == "awq" and cc and cc < (7, 5):
            changes.append(_change("blocker", shown, shown, "vllm-awq-capability"))
            kept.append(opt)
        elif flag == "--kv-cache-dtype" and opt[1].startswith("fp8") and cc and cc < (8, 9) \
                and at_least(version, swap_rule["since"]):
            changes.append(_change("remove", shown, "", "vllm-fp8-kv"))
        else:
            kept.append(opt)
    if cc and cc < (8, 0) and "--dtype" not in {o[0] for o in kept}:
        kept.append(["--dtype", "half"])
        changes.append(_change("add", "", "--dtype half", "vllm-dtype-half"))
    if "--host" not in {o[0] for o in kept}:
        kept.append(["--host", "127.0.0.1"])
        changes.append(_change("add", "", "--host 127.0.0.1", "vllm-host"))
    if cc and cc < (7, 5) and at_least(version, rule("vllm-volta-wheels")["since"]):
        changes.append(_change("check", "", "", "vllm-volta-wheels", f"vLLM {version} on compute capability {cc[0]}.{cc[1]}:"))
    return entry + [w for o in kept for w in o], changes


_LLAMA_RENAMES = {"./server": ("llama-server", "llama-server"), "./main": ("llama-cli", "llama-cli"),
                  "./quantize": ("llama-quantize", "llama-quantize"),
                  "convert-hf-to-gguf.py": ("convert_hf_to_gguf.py", "convert-hf")}


def _correct_llama(argv: list[str]) -> tuple[list[str], list[Change]]:
    out, changes = [], []
    for word in argv:
        if word in _LLAMA_RENAMES:
            new, rule_id = _LLAMA_RENAMES[word]
            changes.append(_change("replace", word, new, rule_id))
            out.append(new)
        else:
            out.append(word)
    if "--host" in out:
        i = out.index("--host") + 1
        if i < len(out) and out[i] not in LOOPBACK:
            changes.append(_change("replace", f"--host {out[i]}", "--host 127.0.0.1", "llama-host",
                                   "To serve other machines, keep 0.0.0.0 only with LLAMA_API_KEY set."))
            out[i] = "127.0.0.1"
    return out, changes


def seed_corrections_for(profile: Profile, installed_version: str | None = None,
                         compute_capability: str | None = None) -> list[SeedCorrection]:
    """The seeds' serve commands for this profile's engine, corrected for its vLLM version/GPU."""
    engine = {"llama-cpp-python": "llama.cpp", "external": None}.get(profile.engine, profile.engine)
    cc = compute_capability or profile.gpu_compute_capability
    version = installed_version or profile.engine_version
    out = []
    for entry in seed_commands():
        if entry["engine"] != engine or entry["kind"] != "serve":
            continue
        out.append(correct_seed_command(entry["id"], version if engine == "vllm" else None, cc))
    return out


# The newest vLLM release whose code ran here: vllm-cpu 0.32.0 reports itself as vLLM 0.32.0 (seen here, 2026-11-29).
NEWEST_VLLM = "0.32.0"


def route_for(profile: Profile) -> Route:
    """The Volta-safe swaps for this profile: its own GPTQ checkpoint when it serves one (else a
    placeholder path), its context as --max-model-len on a GPU profile, and a llama-server command."""
    gptq = profile.model_quant.startswith("GPTQ")
    model = (profile.model_dir or profile.model_name) if gptq else "./qwen27b-gptq-int4"
    gguf = re.sub(r"-GPTQ.*$", "", profile.model_name, flags=re.I) + "-Q4_K_M.gguf" if gptq else "qwen27b-Q4_K_M.gguf"
    ctx = profile.context_tokens if profile.gpu_count > 0 else None
    split = " -sm layer" if profile.gpu_count > 1 else ""
    llama = f"llama-server -m {gguf} -ngl 999{split} -c {ctx or 32768} -np 1 --host 127.0.0.1 --port 8080"
    return Route(model, ctx, llama)


def seed_then_and_now(profile: Profile, installed_version: str | None = None,
                      compute_capability: str | None = None) -> list[SeedCorrection]:
    """For a vLLM profile, each of the seeds' vLLM serve commands three times: as the seed ran it (its own
    vLLM 0.4.2 on its V100: what fails then), for this profile's vLLM, and for the newest vLLM run here
    (NEWEST_VLLM), the last two with the profile's route (AWQ → GPTQ, context within the model's maximum).
    Empty for other engines."""
    if profile.engine != "vllm":
        return []
    cc = compute_capability or profile.gpu_compute_capability
    mine = installed_version or profile.engine_version
    route = route_for(profile)
    out = []
    for entry in seed_commands():
        if entry["engine"] != "vllm" or entry["kind"] != "serve":
            continue
        targets = [(entry["engine_version"], None, "as the seed ran it", entry.get("compute_capability")),
                   (mine, route, f"this profile's vLLM ({profile.name})", cc)]
        if version_tuple(NEWEST_VLLM) != version_tuple(mine):
            targets.append((NEWEST_VLLM, route, "newest vLLM run here", cc))
        for version, rt, label, target_cc in targets:
            out.append(correct_seed_command(entry["id"], version, target_cc, route=rt, label=label))
    return out


def then_and_now_rows(corrections: list[SeedCorrection]) -> list[dict]:
    """One row per (seed command, vLLM version): whether it runs as corrected, and the command."""
    return [{"command": c.command_id, "when": c.label, "target": c.target, "runs as corrected": c.runs,
             "blockers / checks": "; ".join(f"{x.action}: {x.before or x.after}" for x in c.changes
                                            if x.action in ("blocker", "check")) or "",
             "corrected": " ".join(shlex.quote(a) for a in c.corrected)} for c in corrections]


def then_and_now_changes(corrections: list[SeedCorrection]) -> list[dict]:
    """Every change of every (seed command, version), with its reason and source."""
    return [{"command": c.command_id, "when": c.label, **row} for c in corrections for row in c.rows()]


# ---------------------------------------------------------------- what the server reported
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_LLAMA_PATTERNS = {
    "build": re.compile(r"build (\d+) \(([0-9a-f]+)\) with (.+?) for (.+?)\s*$"),
    "system_threads": re.compile(r"system_info: n_threads = (\d+) \(n_threads_batch = (\d+)\) / (\d+)"),
    "file_type": re.compile(r"print_info: file type\s+= (.+?)\s*$"),
    "file_size": re.compile(rf"print_info: file size\s+= {_NUM} (MiB|GiB) \({_NUM} BPW\)"),
    "model_params": re.compile(rf"print_info: model params\s+= {_NUM} ([KMBT])"),
    "model_name": re.compile(r"print_info: general.name\s+= (.+?)\s*$"),
    "offloaded": re.compile(r"offloaded (\d+)/(\d+) layers to GPU"),
    "iswa": re.compile(r"creating\s+(non-SWA|SWA) KV cache"),
    "model_buffer": re.compile(rf"load_tensors:\s+(\S+) model buffer size =\s+{_NUM} MiB"),
    "kv_buffer": re.compile(rf"llama_kv_cache:\s+(\S+) KV buffer size =\s+{_NUM} MiB"),
    # hybrid models (qwen35): the recurrent + conv state of the linear-attention layers, per device
    "rs_buffer": re.compile(rf"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+{_NUM} MiB"),
    "kv_size": re.compile(rf"llama_kv_cache: size =\s+{_NUM} MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\), "
                          rf"K \((\w+)\):\s+{_NUM} MiB, V \((\w+)\):\s+{_NUM} MiB"),
    "compute_buffer": re.compile(rf"(\S+) compute buffer size =\s+{_NUM} MiB"),
    "slots": re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'"),
    "listening": re.compile(r"listening on (\S+)"),
    "flash_attn": re.compile(r"Flash Attention (enabled|disabled)"),
    "prompt_cache": re.compile(r"prompt cache is enabled, size limit: (\d+) MiB"),
}
_CONTEXT_KEYS = ("n_seq_max", "n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "flash_attn", "kv_unified")
_PRINT_INFO_KEYS = ("n_ctx_train", "n_layer", "n_head", "n_head_kv", "n_embd", "n_embd_head_k", "n_swa")
_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _typed(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value, value)


def _last_load(lines: list[str]) -> list[str]:
    """The lines from the last model load on: llama.cpp's fitting pass loads the model once without
    allocating (its KV line can read 0.00 MiB), then again for real."""
    starts = [i for i, line in enumerate(lines) if "llama_model_loader: loaded meta data" in line]
    return lines[starts[-1]:] if starts else lines


def parse_llama_log(text: str) -> dict:
    """What llama-server (or llama_cpp.server, which logs the same llama.cpp lines) reported at start-up.

    Keys (absent when the log has no such line): build, threads, model {name, file_type, file_size_mib,
    bpw, params}, hparams {n_layer, n_ctx_train, ...}, offloaded {layers, of}, model_buffers_mib
    {device: MiB}, kv_buffers_mib, rs_buffers_mib (recurrent state of hybrid models), kv_caches [{kind, mib, cells, layers, seqs, streams, total_cells,
    k_type, k_mib, v_type, v_mib}] (a global and a sliding-window entry for models like Gemma 3), context {n_ctx, n_ctx_seq, ...},
    slots {n_slots, n_ctx_slot, kv_unified}, flash_attention, listening, warnings, errors.
    `cells` is per stream: with -np N and no -kvu there are N streams of n_ctx/N cells.
    """
    lines = text.splitlines()
    out: dict = {}
    for line in lines:
        if m := _LLAMA_PATTERNS["build"].search(line):
            out["build"] = {"number": int(m[1]), "commit": m[2], "compiler": m[3], "target": m[4]}
        elif m := _LLAMA_PATTERNS["system_threads"].search(line):
            out["threads"] = {"n_threads": int(m[1]), "n_threads_batch": int(m[2]), "cpus": int(m[3])}
        elif m := _LLAMA_PATTERNS["slots"].search(line):
            out["slots"] = {"n_slots": int(m[1]), "n_ctx_slot": int(m[2]), "kv_unified": m[3] == "true"}
        elif m := _LLAMA_PATTERNS["listening"].search(line):
            out["listening"] = m[1]
        elif m := _LLAMA_PATTERNS["prompt_cache"].search(line):
            out["prompt_cache_limit_mib"] = int(m[1])
    out.update(_parse_load(_last_load(lines)))
    out["warnings"] = [ln.strip() for ln in lines if re.search(r"^(warning:|\S+ W )", ln.strip())][:50]
    out["errors"] = [ln.strip() for ln in lines if re.search(r"^(error:|\S+ E )", ln.strip())][:50]
    return out


def _parse_load(lines: list[str]) -> dict:
    out: dict = {"model": {}, "hparams": {}, "context": {}}
    model_buf, kv_buf, rs_buf, compute_buf, kv_caches = {}, {}, {}, {}, []
    kind = "all layers"
    for line in lines:
        p = _LLAMA_PATTERNS
        if m := p["file_type"].search(line):
            out["model"]["file_type"] = m[1]
        elif m := p["file_size"].search(line):
            mib = float(m[1]) * (1024 if m[2] == "GiB" else 1)
            out["model"].update(file_size_mib=mib, bpw=float(m[3]))
        elif m := p["model_params"].search(line):
            out["model"]["params"] = round(float(m[1]) * _UNITS[m[2]])
        elif m := p["model_name"].search(line):
            out["model"]["name"] = m[1]
        elif m := p["offloaded"].search(line):
            out["offloaded"] = {"layers": int(m[1]), "of": int(m[2])}
        elif m := p["model_buffer"].search(line):
            model_buf[m[1]] = float(m[2])
        elif m := p["kv_buffer"].search(line):
            kv_buf[m[1]] = kv_buf.get(m[1], 0.0) + float(m[2])  # one line per cache (global + SWA)
        elif m := p["rs_buffer"].search(line):
            rs_buf[m[1]] = rs_buf.get(m[1], 0.0) + float(m[2])
        elif m := p["iswa"].search(line):
            kind = "global" if m[1] == "non-SWA" else "sliding-window"
        elif m := p["kv_size"].search(line):
            kv_caches.append({"kind": kind, "mib": float(m[1]), "cells": int(m[2]), "layers": int(m[3]), "seqs": int(m[4]),
                              "streams": int(m[5]), "total_cells": int(m[2]) * int(m[5]),
                              "k_type": m[6], "k_mib": float(m[7]), "v_type": m[8], "v_mib": float(m[9])})
        elif m := p["compute_buffer"].search(line):
            compute_buf[m[1]] = float(m[2])
        elif m := p["flash_attn"].search(line):
            out["flash_attention"] = m[1] == "enabled"
        elif m := re.search(r"print_info: (\w+)\s+= (\S+)\s*$", line):
            if m[1] in _PRINT_INFO_KEYS:
                out["hparams"][m[1]] = _typed(m[2])
        elif m := re.search(r"llama_context: (\w+)\s+= (\S+)\s*$", line):
            if m[1] in _CONTEXT_KEYS:
                out["context"][m[1]] = _typed(m[2])
    if model_buf:
        out["model_buffers_mib"] = model_buf
    if kv_buf:
        out["kv_buffers_mib"] = kv_buf
    if rs_buf:
        out["rs_buffers_mib"] = rs_buf
    if compute_buf:
        out["compute_buffers_mib"] = compute_buf
    if kv_caches:
        out["kv_caches"] = kv_caches
    return {k: v for k, v in out.items() if v != {}}


_VLLM_PATTERNS = {
    # "vLLM API server version X" (older releases) or the start-up banner's "version X" (0.11+)
    "version": re.compile(r"(?:vLLM API server version|█\s+version) (\S+)"),
    "engine": re.compile(r"Initializing an? (V\d) LLM engine \(v(\S+?)\)"),
    # one line on current releases ("CPU KV cache size: 23,296 tokens, Maximum concurrency for 4,096 tokens
    # per request: 5.69x"), two lines on older ones, and "GPU" instead of "CPU" on a GPU
    "kv_tokens": re.compile(r"\b([A-Z]+)(?: \+ host)? KV cache size: ([0-9,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x"),
    "kv_memory": re.compile(r"Available KV cache memory: ([0-9.]+) GiB"),
    "kv_memory_cpu": re.compile(r"Explicitly set \(([0-9.]+)/([0-9.]+)\) GiB for KV cache"),
    "blocks": re.compile(r"# GPU blocks: (\d+), # CPU blocks: (\d+)"),
    "weights": re.compile(r"(?:Model loading took|Loading model weights took) ([0-9.]+) ?GiB"),
    "checkpoint": re.compile(r"Checkpoint size: ([0-9.]+) GiB"),
    "max_model_len": re.compile(r"Using max model len (\d+)"),
    "attention_backend": re.compile(r"Using (\w+) backend"),
    "listening": re.compile(r"Starting vLLM (?:API )?server on (\S+)"),
    "init_engine": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) (?:s|seconds)"),
}


def parse_vllm_log(text: str) -> dict:
    """What vLLM reported at start-up: version (and engine V0/V1), KV cache tokens and the device that holds
    them (V1) or GPU/CPU blocks (V0), KV memory, max concurrency at max_model_len, max_model_len, weight
    memory, attention backend, where it listens, engine start-up time, errors."""
    out: dict = {}
    kv_tokens = []
    for line in text.splitlines():
        p = _VLLM_PATTERNS
        if m := p["version"].search(line):
            out["version"] = m[1]
        if m := p["engine"].search(line):
            out["engine"] = m[1]
            out.setdefault("version", m[2])
        if m := p["kv_tokens"].search(line):
            kv_tokens.append(int(m[2].replace(",", "")))
            out["kv_cache_device"] = m[1]
        if m := p["max_concurrency"].search(line):  # on the KV line itself in current releases
            out["max_concurrency"] = {"tokens_per_request": int(m[1].replace(",", "")), "x": float(m[2])}
        if m := p["kv_memory"].search(line):
            out["kv_cache_memory_gib"] = float(m[1])
        elif m := p["kv_memory_cpu"].search(line):  # the CPU build: VLLM_CPU_KVCACHE_SPACE of the node's RAM
            out["kv_cache_memory_gib"] = float(m[1])
            out["node_memory_gib"] = float(m[2])
        for key in ("weights", "checkpoint"):
            if m := p[key].search(line):
                out[f"{key}_gib"] = float(m[1])
        if m := p["blocks"].search(line):
            out["blocks"] = {"gpu": int(m[1]), "cpu": int(m[2])}
        if m := p["max_model_len"].search(line):
            out["max_model_len"] = int(m[1])
        if m := p["attention_backend"].search(line):
            out["attention_backend"] = m[1]
        if m := p["listening"].search(line):
            out["listening"] = m[1]
        if m := p["init_engine"].search(line):
            out["init_engine_s"] = float(m[1])
    if kv_tokens:
        out["kv_cache_tokens"] = sum(kv_tokens)  # one line per engine core (data-parallel rank)
    out["errors"] = [ln.strip() for ln in text.splitlines() if re.search(r"\b(ERROR|Traceback)\b", ln)][:50]
    return out


def parse_log(engine: str, text: str) -> dict:
    """The right parser for the engine's log."""
    if engine == "vllm":
        return parse_vllm_log(text)
    if engine in ("llama.cpp", "llama-cpp-python"):
        return parse_llama_log(text)
    return {}


def failure_said(engine: str, text: str, most: int = 3) -> list[str]:
    """The engine's own words for why it failed, from its log: llama.cpp states the cause as a warning just
    before its first error ("context type MTP requested but model doesn't contain MTP layers", then "E ...
    failed to create MTP context"), so that warning comes first; time stamp and level are left out."""
    if engine not in ("vllm", "llama.cpp", "llama-cpp-python"):
        return []
    errors = parse_log(engine, text)["errors"]
    if not errors or engine == "vllm":
        return errors[:most]
    lines = [ln.strip() for ln in text.splitlines()]
    first = lines.index(errors[0])
    cause = [lines[first - 1]] if first and re.search(r"^(warning:|\S+ W )", lines[first - 1]) else []
    return [re.sub(r"^(\S+ [EW] |error: |warning: )", "", ln).strip() for ln in cause + errors][:most]


def reported_rows(reported: dict) -> list[dict]:
    """The parsed log as (what, value) rows: layers offloaded, KV buffer, slots, context, model, build."""
    rows = []

    def add(what, value):
        if value not in (None, {}, []):
            rows.append({"what": what, "value": value})

    off = reported.get("offloaded")
    add("layers offloaded to GPU", f"{off['layers']}/{off['of']}" if off else "none (no GPU offload in this build/run)"
        if "model" in reported else None)
    for i, kv in enumerate(reported.get("kv_caches", [])):
        add(f"KV cache ({kv['kind']})",
            f"{kv['mib']:.2f} MiB = {kv['streams']} × {kv['cells']} cells × {kv['layers']} layers "
            f"(K {kv['k_type']} {kv['k_mib']:.2f} MiB, V {kv['v_type']} {kv['v_mib']:.2f} MiB)")
    for dev, mib in reported.get("kv_buffers_mib", {}).items():
        add(f"KV buffer on {dev}", f"{mib:.2f} MiB")
    for dev, mib in reported.get("rs_buffers_mib", {}).items():
        add(f"recurrent-state buffer on {dev}", f"{mib:.2f} MiB")
    for dev, mib in reported.get("model_buffers_mib", {}).items():
        add(f"model buffer on {dev}", f"{mib:.2f} MiB")
    slots = reported.get("slots")
    if slots:
        add("slots", slots["n_slots"])
        add("context per slot (n_ctx_slot)", slots["n_ctx_slot"])
        add("KV unified across slots", slots["kv_unified"])
    ctx = reported.get("context", {})
    add("context total (n_ctx)", ctx.get("n_ctx"))
    add("context trained (n_ctx_train)", reported.get("hparams", {}).get("n_ctx_train"))
    add("flash attention", reported.get("flash_attention"))
    model = reported.get("model", {})
    add("model", model.get("name"))
    add("model params", model.get("params"))
    add("model file type", model.get("file_type"))
    if "file_size_mib" in model:
        add("model file size", f"{model['file_size_mib']:.2f} MiB ({model.get('bpw')} bits per weight)")
    build = reported.get("build")
    if build:
        add("llama.cpp build", f"{build['number']} ({build['commit']}), {build['compiler']}, {build['target']}")
    thr = reported.get("threads")
    if thr:
        add("threads", f"{thr['n_threads']} of {thr['cpus']} CPUs")
    for key, what in (("version", "vLLM version"), ("engine", "vLLM engine"), ("kv_cache_tokens", "KV cache (tokens)"),
                      ("kv_cache_device", "KV cache on"), ("kv_cache_memory_gib", "KV cache memory (GiB)"),
                      ("max_model_len", "max model len (tokens per request)"), ("weights_gib", "weights (GiB)"),
                      ("checkpoint_gib", "checkpoint size (GiB)"), ("attention_backend", "attention backend"),
                      ("init_engine_s", "engine init: profile, KV cache, warm-up (s)"), ("listening", "listening on")):
        add(what, reported.get(key))
    if reported.get("max_concurrency"):
        mc = reported["max_concurrency"]
        add("max concurrency at full length", f"{mc['x']}× at {mc['tokens_per_request']} tokens")
    if reported.get("blocks"):
        add("KV blocks (GPU, CPU)", f"{reported['blocks']['gpu']}, {reported['blocks']['cpu']}")
    return rows


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
_SECRET_NAME = re.compile(r"(?i)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)")
# The variable each engine reads its API key from (llama.cpp common/arg.cpp: --api-key, env LLAMA_API_KEY;
# vLLM: VLLM_API_KEY; llama_cpp.server's settings: API_KEY).
# The runner's per-run key for the lab's own servers travels to kernels in this variable (lab.serving.serve.run_api_key).
RUN_KEY_ENV = "LAB_RUN_API_KEY"
API_KEY_VARIABLE = {"llama.cpp": "LLAMA_API_KEY", "vllm": "VLLM_API_KEY", "llama-cpp-python": "API_KEY"}
MIN_API_KEY_CHARS = 16  # a key guarding a network-facing server: shorter ones are guessed


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
