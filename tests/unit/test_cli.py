"""`python -m lab validate | plan | report | compare`: exit status 0 (all good), 1 (a problem found in what was
given: an invalid profile, a plan that does not fit, a folder that is not a run — one clear message naming the
file and the field, no traceback), 2 (bad usage: argparse's message). In-process through conftest.cli_output;
one real subprocess shows that the exit status a shell sees is the same. The many bad-profile and bad-record
cases are in tests/unit/test_reliability_profiles.py and tests/unit/test_reliability_untrusted.py; this file is the
contract, one case per verb and status."""
import json

import pytest
import yaml
from conftest import ROOT, cli_output


def _profile(tmp_path, name: str, base: str = "cpu-default", **changes):
    data = yaml.safe_load((ROOT / "params" / f"{base}.yaml").read_text())
    data.update(changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


USAGE = [["validate"], ["validate", "cpu-default", "--bogus"], ["plan"], ["plan", "cpu-default", "extra"],
         ["report"], ["report", "a", "b"], ["compare"], ["compare", "--html"]]


@pytest.mark.parametrize("argv", USAGE, ids=" ".join)
def test_bad_usage_exits_2_with_argparse_s_message(argv):
    rc, text = cli_output(argv)
    assert rc == 2 and "usage: .venv/bin/python -m lab" in text and "error:" in text and "Traceback" not in text, text


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
