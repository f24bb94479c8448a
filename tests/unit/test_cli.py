"""`python -m lab validate | plan | report | compare`: exit status 0 (all good), 1 (a problem found in what was
given: an invalid profile, a plan that does not fit, a folder that is not a run — one clear message naming the
file and the field, no traceback), 2 (bad usage: argparse's message). In-process through conftest.cli_output;
one real subprocess shows that the exit status a shell sees is the same. The many bad-profile and bad-record
cases are in tests/test_reliability_profiles.py and tests/test_reliability_untrusted.py; this file is the
contract, one case per verb and status."""
import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, cli_output

from lab.core import evidence


def _profile(tmp_path, name: str, base: str = "cpu-default", **changes):
    data = yaml.safe_load((ROOT / "params" / f"{base}.yaml").read_text())
    data.update(changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run_folder(path):
    evidence.write_record(path, "01_hardware", {"title": "Hardware", "summary": {"bandwidth_gb_s": 27.4},
                                                "checks": [{"name": "RAM", "status": "pass"}]})
    (path / "manifest.json").write_text(json.dumps({"run_id": path.name, "profile": {"name": "cpu-default"},
                                                    "notebooks": [], "status": "ok"}))
    return path


USAGE = [["validate"], ["validate", "cpu-default", "--bogus"], ["plan"], ["plan", "cpu-default", "extra"],
         ["report"], ["report", "a", "b"], ["compare"], ["compare", "--html"]]


@pytest.mark.parametrize("argv", USAGE, ids=" ".join)
def test_bad_usage_exits_2_with_argparse_s_message(argv):
    rc, text = cli_output(argv)
    assert rc == 2 and "usage: python -m lab" in text and "error:" in text and "Traceback" not in text, text


def test_validate_0_for_good_profiles_1_naming_the_file_and_field(tmp_path):
    rc, text = cli_output(["validate", "cpu-default", str(ROOT / "params" / "v100-32g-x1.yaml")])
    assert rc == 0 and text.count("ok      ") == 2, text
    bad = _profile(tmp_path, "bad", context_tokens="lots")
    rc, text = cli_output(["validate", "cpu-default", str(bad)])  # one bad file among good ones: 1
    assert rc == 1 and f"invalid {bad}" in text and "field 'context_tokens': found 'lots'" in text, text
    assert "Traceback" not in text and "ok      cpu-default" in text


def test_plan_0_when_it_fits_1_when_it_does_not_or_the_profile_is_invalid(tmp_path):
    rc, text = cli_output(["plan", "cpu-default"])
    assert rc == 0 and "Traceback" not in text and text.strip(), text
    rc, text = cli_output(["plan", "cpu-default", "--json"])
    assert rc == 0 and json.loads(text)["fits"] is True
    crowded = _profile(tmp_path, "crowded", base="v100-32g-x1", parallel_slots=64)
    rc, text = cli_output(["plan", str(crowded), "--json"])
    plan = json.loads(text)
    assert rc == 1 and plan["fits"] is False and "kv-does-not-fit" in {f["id"] for f in plan["findings"]}
    bad = _profile(tmp_path, "bad", gpu_count=-1)
    rc, text = cli_output(["plan", str(bad)])
    assert rc == 1 and str(bad) in text and "gpu_count" in text and "Traceback" not in text, text


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
    rc, text = cli_output(["compare", str(a), str(b)])
    assert rc == 0 and "27.4" in text and "Traceback" not in text, text
    rc, text = cli_output(["compare", str(a), str(tmp_path / "nope")])
    assert rc == 1 and str(tmp_path / "nope") in text and "Traceback" not in text, text


@pytest.mark.tools
def test_a_shell_sees_the_same_exit_statuses():
    def status(*argv):
        return subprocess.run([sys.executable, "-m", "lab", *argv], capture_output=True, text=True, cwd=ROOT,
                              timeout=120).returncode

    assert (status("validate", "cpu-default"), status("validate", "no-such-profile"), status("validate")) == (0, 1, 2)
