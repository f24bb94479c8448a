"""lab.core.processes.stop: SIGTERM, a grace period, then SIGKILL — on real child processes."""
import os
import subprocess
import sys

import pytest

from lab.core import processes

pytestmark = pytest.mark.tools  # starts processes


def test_stop_terminates_a_child_that_obeys_sigterm():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert processes.stop(proc, grace_s=10) == "SIGTERM"
    assert proc.returncode == -15


def test_stop_kills_a_child_that_ignores_sigterm():
    proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"  # its handler is in place
    assert processes.stop(proc, grace_s=0.5) == "SIGKILL"
    assert proc.returncode == -9
    proc.stdout.close()


def test_stop_says_none_for_a_child_already_gone():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert processes.stop(proc) is None


def test_stop_group_leaves_nothing_of_the_group():
    # the child starts a grandchild that ignores SIGTERM, in the child's own session: what Chromium's renderers do
    code = ("import signal, subprocess, sys, time; "
            "g = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); time.sleep(60)']); print(g.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild = int(proc.stdout.readline())
    assert processes.stop(proc, grace_s=2, group=True) == "SIGTERM"
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nobody left in the group
    with pytest.raises(ProcessLookupError):
        os.kill(grandchild, 0)
    proc.stdout.close()
