"""How set-up runs a step: its name, how long it took or that it was cached, and a failed command as one message
with its log's tail (set-up then stops with that command's story, not a traceback). Standard library only."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def step(name: str):
    """Print a step's name, run it, print how long it took (or that it was cached)."""

    def wrap(fn):
        def run(*args, **kwargs):
            print(f"[setup] {name} ...", flush=True)
            t0 = time.monotonic()
            note = fn(*args, **kwargs) or "done"
            print(f"[setup] {name}: {note} in {time.monotonic() - t0:.1f} s", flush=True)

        return run

    return wrap


def sh(cmd: list[str], log: Path | None = None, env: dict | None = None, cwd: Path | None = None) -> None:
    """Run a command; on failure show the log's tail and stop set-up with its exit status."""
    full_env = {**os.environ, **(env or {})}
    if log is None:
        if subprocess.run(cmd, env=full_env, cwd=cwd).returncode != 0:
            sys.exit(f"[setup] failed: {' '.join(cmd)} (its output is above)")
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env, cwd=cwd)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        sys.exit(f"[setup] failed: {' '.join(cmd)}\n  log: {log}\n" + "\n".join(tail))
