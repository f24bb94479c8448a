"""The tools tier of tests/unit/test_vllm_lab_path.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
from __future__ import annotations

import subprocess
import sys

import pytest

from lab.serving import engines, serve
from lab.serving.server import group_members
from conftest import wait_for


# ---------------------------------------------------------------- serve.stop gives children time
@pytest.mark.tools
def test_stop_waits_for_children_still_shutting_down(tmp_path):
    """The leader exits at once on SIGTERM; its child takes 1 s (like vLLM's EngineCore): not a leftover.
    Each writes a file once its SIGTERM handler is in place; the test waits for both, not a fixed time."""
    code = ("import os, signal, sys, time\n"
            "if os.fork() == 0:\n"
            "    signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.0), os._exit(0)))\n"
            "    open(sys.argv[1] + '/child', 'w').close()\n"
            "    while True: time.sleep(0.05)\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "open(sys.argv[1] + '/leader', 'w').close()\n"
            "while True: time.sleep(0.05)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], start_new_session=True)
    cmd = engines.Command("test", (sys.executable,), "127.0.0.1", 1, "/health", None, ())
    server = serve.Server(cmd, "t", proc, tmp_path / ".t.log.partial", tmp_path / "t.log")
    assert wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "leader").exists(), timeout_s=120)
    assert len(group_members(proc.pid)) == 2
    report = server.stop(timeout_s=60)
    # SIGTERM was enough (no SIGKILL) and the stop waited for the child's 1 s of shutting down, however long
    # the machine made it take: nothing left over, nothing running
    assert report["signal"] == "SIGTERM" and report["leftover_pids"] == [] and report["left_running"] == []
    assert report["stop_s"] >= 0.9
