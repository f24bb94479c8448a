"""Stopping a child process the lab started for a moment (a headless browser, the benchmark's token source):
SIGTERM, a grace period, then SIGKILL. One shape for every such caller; servers have their own stop
(lab.serving.serve: the whole process group, with a report), and `lab run` stops every descendant
(lab.records.runner.stop_children)."""
from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> str | None:
    """Stop `proc`: SIGTERM, wait `grace_s`, then SIGKILL and wait again. Returns the last signal sent
    ("SIGTERM" or "SIGKILL"), or None when it had already exited."""
    if proc.poll() is not None:
        return None
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
        return "SIGTERM"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)
        return "SIGKILL"
