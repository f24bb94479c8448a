"""The GPU smoke's device script prints the judge's verdict (lab/setup/smoke_verdict.py) on a committed run folder."""
from __future__ import annotations

import subprocess

import pytest

from lab.core.paths import ROOT

H100_SMOKE = ROOT / "outputs" / "h100-x1" / "20261207T162624Z_add993cf"


@pytest.mark.tools
def test_the_device_script_prints_the_judges_verdict():
    out = subprocess.run(["bash", str(ROOT / "lab/device/run_h200.sh"), "--smoke-verdict", str(H100_SMOKE)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (out.returncode, out.stdout.strip().splitlines()[-1]) == (0, "SMOKE PASS"), out.stderr
