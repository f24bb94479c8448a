"""The tools tier of tests/unit/test_cli.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, cli_output

from lab.core import evidence


def _run_folder(path):
    evidence.write_record(path, "01_hardware", {"title": "Hardware", "summary": {"bandwidth_gb_s": 27.4},
                                                "checks": [{"name": "RAM", "status": "pass"}]})
    (path / "manifest.json").write_text(json.dumps({"run_id": path.name, "profile": {"name": "cpu-default"},
                                                    "notebooks": [], "status": "ok"}))
    return path


@pytest.mark.tools
def test_report_0_for_a_run_folder_1_naming_what_is_not_one(tmp_path):
    run = _run_folder(tmp_path / "run")
    rc, text = cli_output(["report", str(run)])
    assert rc == 0 and (run / "report.html").exists() and str(run / "report.html") in text, text
    for not_run in (tmp_path / "nope", run / "manifest.json"):
        rc, text = cli_output(["report", str(not_run)])
        assert rc == 1 and str(not_run) in text and "Traceback" not in text, text


@pytest.mark.tools
def test_compare_0_for_run_folders_1_naming_what_is_not_one(tmp_path):
    a, b = _run_folder(tmp_path / "a"), _run_folder(tmp_path / "b")
    rc, text = cli_output(["compare", str(a), str(b), "--all"])  # the two are alike: --all shows their results
    assert rc == 0 and "27.4" in text and "Traceback" not in text, text
    rc, text = cli_output(["compare", str(a), str(tmp_path / "nope")])
    assert rc == 1 and str(tmp_path / "nope") in text and "Traceback" not in text, text


@pytest.mark.tools
def test_a_shell_sees_the_same_exit_statuses():
    def status(*argv):
        return subprocess.run([sys.executable, "-m", "lab", *argv], capture_output=True, text=True, cwd=ROOT,
                              timeout=120).returncode

    assert (status("validate", "cpu-default"), status("validate", "no-such-profile"), status("validate")) == (0, 1, 2)
