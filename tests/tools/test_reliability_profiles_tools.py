"""The tools tier of tests/unit/test_reliability_profiles.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, record_figure


@pytest.mark.tools
def test_the_real_cli_refuses_a_binary_profile_in_one_line(tmp_path):
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(os.urandom(512) + b"\0")
    for verb in (["validate", str(bad)], ["plan", str(bad)], ["run", "--profile", str(bad)]):
        proc = subprocess.run([sys.executable, "-m", "lab", *verb], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and str(bad) in proc.stderr, proc.stderr


@pytest.mark.tools
def test_two_runs_started_together_never_share_a_run_folder(tmp_path):
    import threading

    from lab.core import evidence

    n = 20
    barrier, made, errors = threading.Barrier(n), [], []

    def claim():
        barrier.wait()
        try:
            made.append(evidence.new_run_dir("cpu-default", tmp_path))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record_figure("run folders claimed by 20 runs started together", n, len(set(made)))
    assert not errors and len(set(made)) == n
