"""Stopping a child process the lab started for a moment (a headless browser, the benchmark's token source):
SIGTERM, a grace period, then SIGKILL. One shape for every such caller; servers have their own stop
(lab.serving.server: the whole process group, with a report), and `lab run` stops every descendant
(lab.records.runner.stop_children)."""
from __future__ import annotations

import os
import signal
import subprocess
import time


# llama.cpp's CPU threads (OpenMP in the lab's build: libgomp) meet at a barrier hundreds of times per token, and
# libgomp lets a waiting thread spin 300,000 times before it sleeps. With as many threads as cores and other work
# running (the benchmark client, a notebook kernel, a CI job), the thread it waits for is descheduled while it
# spins. Measured on the 2-core CI VM (2026-12-02, llama-bench SmolLM2-135M Q4_1 -t 2 -p 64 -n 32, 2-3 runs
# each), tg32 in tok/s:
#   libgomp default         idle 63-104   one core busy 27-30   both cores busy 0.6 (141 s; the next run timed out)
#   GOMP_SPINCOUNT=1000     idle 73-104   one core busy 31-32   both cores busy 29-36 (4 s)
#   OMP_WAIT_POLICY=PASSIVE idle 61-67    one core busy 33-37   both cores busy 43-51 (3 s)
# A short spin keeps the idle speed and ends the collapse; PASSIVE (never spin) costs a third of the idle speed of
# a small model. llama.cpp PR #29258 and #13079 describe the same collapse. A value the user exported wins.
LLAMA_CPP_ENV = {"GOMP_SPINCOUNT": "1000"}


def llama_cpp_env(extra: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """What the lab adds to a llama.cpp process's environment: LLAMA_CPP_ENV (unless `base`, default os.environ,
    already sets it) + `extra`. The caller records it with the command."""
    src = os.environ if base is None else base
    return {**{k: v for k, v in LLAMA_CPP_ENV.items() if k not in src}, **(extra or {})}


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def stop(proc: subprocess.Popen, grace_s: float = 5.0, group: bool = False) -> str | None:
    """Stop `proc`: SIGTERM, wait `grace_s`, then SIGKILL and wait again. Returns the last signal sent
    ("SIGTERM" or "SIGKILL"), or None when it had already exited.

    group: `proc` leads its own process group (started with start_new_session=True) and the whole group is
    stopped, until none of it is left: Chromium's renderer and GPU processes outlive its main process for a
    moment, still writing into the profile folder that the caller is about to remove."""
    def send(sig: int) -> None:
        if group:
            _signal_group(proc.pid, sig)
        else:
            proc.send_signal(sig)

    sent = None
    if proc.poll() is None:
        send(signal.SIGTERM)
        sent = "SIGTERM"
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            sent = "SIGKILL"
            proc.wait(timeout=grace_s)
    if group:
        _wait_group_gone(proc.pid, grace_s)
        if _signal_group(proc.pid, signal.SIGKILL):  # what outlived its leader and the grace period
            _wait_group_gone(proc.pid, 2.0)
    return sent


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _signal_group(pgid, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
