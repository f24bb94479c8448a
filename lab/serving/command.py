"""A server command and why each of its flags is there: `Command` (argv, environment, how to reach the server) and
`Note` (flag, reason, source), the rules of lab/data/engine_rules.yaml they cite, and the pieces every engine's builder
shares (the model argument, the host's notes, the CUDA environment, the engine's Python). The builders:
lab.serving.engines (llama.cpp, llama-cpp-python, external, endpoint) and lab.serving.vllm_command."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lab.core import facts, paths
from lab.core.profiles import Profile

Level = Literal["info", "warn", "error"]
LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


def note(rule_id: str, flag: str = "", level: Level = "info", prefix: str = "") -> Note:
    """The note for `flag` that quotes rule `rule_id` of lab/data/engine_rules.yaml (its text, after `prefix`, and source)."""
    r = rule(rule_id)
    text = f"{prefix} {r['text']}".strip() if prefix else r["text"]
    return Note(flag, text, r["source"], level)




def model_arg(profile: Profile, model_path: str | Path | None) -> tuple[str, list[Note]]:
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


def host_notes(profile: Profile, host: str, rule_id: str) -> list[Note]:
    if host in LOOPBACK:
        return [note(rule_id, "--host")]
    level: Level = "info" if profile.api_key_env else "error"
    return [note(rule_id, "--host", level,
                  prefix=f"host {host} exposes the server to the network (key from ${profile.api_key_env}).")]


def cuda_env(profile: Profile) -> tuple[dict[str, str], list[Note]]:
    """CUDA_DEVICE_ORDER / CUDA_VISIBLE_DEVICES for a profile with several GPUs (or an explicit GPU list):
    the engine then numbers the cards as nvidia-smi does."""
    env, notes = {}, []
    if profile.gpu_count > 1 or profile.cuda_visible_devices:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        notes.append(note("cuda-device-order", "CUDA_DEVICE_ORDER"))
    if profile.cuda_visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = profile.cuda_visible_devices
        notes.append(note("cuda-visible-devices", "CUDA_VISIBLE_DEVICES"))
    return env, notes


def engine_python_path(profile: Profile) -> str | None:
    """The profile's engine_python as the path to run: a relative one (".venv-vllm/bin/python") is
    relative to the checkout, not to whatever folder the caller runs in (a notebook runs in notebooks/).
    Kept as written when it does not exist here, or when the venv here is another build (the CPU
    vLLM of cpu-vllm is not the vLLM a GPU profile plans for): then it names the venv to make there."""
    if not profile.engine_python:
        return None
    path = Path(profile.engine_python).expanduser()
    if not path.is_absolute() and (paths.ROOT / path).exists() and venv_fits(profile, paths.ROOT / path):
        return str(paths.ROOT / path)
    return str(path)


def venv_fits(profile: Profile, python: Path) -> bool:
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
