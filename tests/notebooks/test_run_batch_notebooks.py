"""The notebooks tier of tests/unit/test_run_batch.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT


@pytest.mark.notebooks
def test_a_real_batch_of_notebook_01(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text()),
                                   "gpu_memory_utilisation": 0.8}))
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", f"cpu-default,{bad},v100-32g-x1",
                           "--only", "01", "--out", str(tmp_path / "runs")], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 11, said[-3000:]  # 10 + bad.yaml; notebook 01 runs on both others (v100: plan mode)
    assert "did you mean 'gpu_memory_utilization'?" in said and "[batch] 3/3 v100-32g-x1: ok" in said
    for name in ("cpu-default", "v100-32g-x1"):
        [run_dir] = (tmp_path / "runs" / name).iterdir()
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["profile"]["name"] == name and manifest["status"] == "ok"
    assert "profiles: 3, ok 2, failed 1" in said
