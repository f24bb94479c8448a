"""The notebooks tier of tests/unit/test_planmode.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from lab.core import checks, planmode
from lab.records import runner


@pytest.mark.notebooks
def test_a_gpu_profile_on_this_cpu_machine_runs_in_plan_mode_and_exits_all_good(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "v100-32g-x1", "--only", "01,02",
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    said = proc.stdout + proc.stderr
    assert proc.returncode == runner.EXIT_OK, said[-3000:]
    assert said.count(planmode.NOT_HERE) == 2  # once as the run starts, once in its last lines (mode: plan)
    [run] = tmp_path.iterdir()
    m = json.loads((run / "manifest.json").read_text())
    assert m["mode"] == "plan" and m["status"] == "ok" and m["check_counts"]["fail"] == 0
    hw = json.loads((run / "records" / "01_hardware.json").read_text())
    assert hw["mode"] == "plan" and hw["checks"] and {c["status"] for c in hw["checks"]} == {"not-run"}
    assert json.loads((run / "records" / "02_install.json").read_text())["mode"] == "plan"
