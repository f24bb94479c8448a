"""Notebooks tier: papermill run by hand (`papermill NB OUT -p profile params/X.yaml`, `-y "settings: {...}"`), not
through `lab run`: the notebook runs THAT profile or stops with an error naming what was wrong. `-f params/X.yaml`
(papermill's own usage: a parameter file per hardware profile) runs profile X, and a papermill run given no run_dir
gets a folder of its own.

Notebook 01 (the cheapest on CPU) for the runs that go through; the refusals stop in its session cell."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import PLANTED_SECRETS, ROOT, leaked_secrets

from lab.core import evidence, profiles

pytestmark = pytest.mark.notebooks
NOTEBOOK = ROOT / "notebooks" / "01_hardware_checks.ipynb"
PAPERMILL = Path(sys.executable).parent / "papermill"  # the console script the lab's venv installs


def papermill(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """`papermill notebooks/01_hardware_checks.ipynb OUT ARGS -k llm-lab -p run_dir RUN` from the project folder (the
    run folder given so the test writes nothing under outputs/), with planted secrets in the environment."""
    out, run = tmp_path / "out.ipynb", tmp_path / "run"
    proc = subprocess.run([str(PAPERMILL), str(NOTEBOOK), str(out), *args, "-k", "llm-lab", "-p", "run_dir", str(run)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, **PLANTED_SECRETS})
    return proc, out, run


def outputs_text(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    return "\n".join(json.dumps(c.get("outputs", []), ensure_ascii=False) for c in nb["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("name", ["cpu-default", "v100-32g-x1"])
def test_papermill_p_profile_runs_the_profile_file_it_was_given(tmp_path, name):
    proc, out, run = papermill(tmp_path, "-p", "profile", f"params/{name}.yaml")
    # v100-32g-x1 on this CPU box: its GPU checks fail (they are checks, not errors) and the notebook runs on
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((run / "records" / "01_hardware.json").read_text())
    assert rec["provenance"]["profile_file"] == str((ROOT / "params" / f"{name}.yaml").resolve())
    assert rec["charts"][0]["figure"]["layout"]["title"]["text"] == f"Hardware checks: {name}"
    shown = outputs_text(out)
    assert f"The answer so far · {name}" in shown
    if name != "cpu-default":
        assert "cpu-default" not in shown  # the old silent default shows nowhere
        gpu = {c["name"]: c["status"] for c in rec["checks"] if c["name"].lower().startswith("gpu")}
        assert gpu["GPU count"] == "not-run", gpu  # no V100 here: plan mode lists the V100 profile's checks, not run
    scanned, leaks = leaked_secrets(run)
    assert scanned and not leaks, leaks


def test_papermill_y_settings_changes_one_setting_and_keeps_a_copy(tmp_path):
    proc, out, run = papermill(tmp_path, "-y", "settings: {threads: 1}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((run / "records" / "01_hardware.json").read_text())
    copy = Path(rec["provenance"]["profile_file"])
    assert copy.parent == run and copy.name.startswith("profile-cpu-default-settings-")
    assert rec["provenance"]["profile_sha256"] == evidence.sha256_file(copy)
    # the copy is params/cpu-default.yaml's settings with threads changed, and nothing else
    assert yaml.safe_load(copy.read_text()) == {**yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text()),
                                                "threads": 1}
    assert profiles.load(copy).threads == 1


def test_papermill_f_params_file_runs_that_profile(tmp_path):
    proc, out, run = papermill(tmp_path, "-f", "params/v100-32g-x1.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((run / "records" / "01_hardware.json").read_text())
    assert rec["provenance"]["profile_file"] == str((ROOT / "params" / "v100-32g-x1.yaml").resolve())
    assert rec["charts"][0]["figure"]["layout"]["title"]["text"] == "Hardware checks: v100-32g-x1"
    assert "The answer so far · v100-32g-x1" in outputs_text(out) and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["-y", "settings: {gpu_memory_utilisation: 0.8}"], "did you mean 'gpu_memory_utilization'"),
    (["-y", "settings: {threads: 0}"], "params/cpu-default.yaml with settings threads: 0: 1 problem(s)"),
], ids=["unknown-key", "a-bad-setting"])
def test_papermill_refuses_what_it_cannot_run_in_the_session_cell(tmp_path, args, message):
    proc, out, run = papermill(tmp_path, *args)
    assert proc.returncode != 0
    assert "ProfileError" in proc.stderr and message in proc.stderr, proc.stderr[-3000:]
    nb = json.loads(out.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "injected-parameters" in code[1]["metadata"]["tags"]
    [failed] = [i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert failed == 2 and "page.start(profile, run_dir, settings)" in "".join(code[2]["source"])  # the cell after
    assert not (run / "records").exists() or not list((run / "records").iterdir())  # nothing recorded
