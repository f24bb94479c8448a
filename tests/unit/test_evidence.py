"""Records and manifests: strict JSON, provenance, redaction (pure, no engines)."""
import json
import math

import pytest

from lab.core import checks, evidence, profiles, redaction, run_folder
from lab.records import manifest, report
from lab.core.checks import Check


def test_record_is_strict_json_with_schema_and_provenance(tmp_path):
    path = evidence.write_record(tmp_path, "01_hardware", {"summary": {"bandwidth_gb_s": 1.5}, "bandwidth": math.nan,
                                                           "checks": [Check("a", "pass", 1, 1)]},
                                 profile_path=profiles.resolve("cpu-default"))
    body = json.loads(path.read_text())
    assert body["schema_version"] == evidence.SCHEMA_VERSION
    assert body["record"] == "01_hardware"
    assert body["bandwidth"] is None  # no value, never 0 and never invalid JSON
    assert body["checks"][0]["status"] == "pass"
    prov = body["provenance"]
    assert len(prov["profile_sha256"]) == 64 and prov["git"]["short"]
    assert prov["packages"]["pydantic"]


def test_record_refuses_unknown_objects(tmp_path):
    with pytest.raises(TypeError, match="cannot record"):
        evidence.write_record(tmp_path, "01_x", {"thing": object()})


def test_record_name_is_checked(tmp_path):
    with pytest.raises(ValueError, match="NN_words"):
        evidence.write_record(tmp_path, "hardware", {})


@pytest.mark.parametrize("text,secret", [
    ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
    ("--api-key sk-1234567890abcdef", "sk-1234567890abcdef"),
    ("api_key=hunter2hunter2", "hunter2hunter2"),
    ("HF token hf_ABCDEFGHIJKLMNOP used", "hf_ABCDEFGHIJKLMNOP"),
])
def test_redact_hides_secrets(text, secret):
    assert secret not in redaction.redact(text)


def test_run_dir_layout(tmp_path):
    run = evidence.new_run_dir("cpu-default", tmp_path)
    assert {p.name for p in run.iterdir()} == {"records", "notebooks", "logs"}
    assert run.name.endswith(evidence.git_state()["short"])
    assert evidence.new_run_dir("cpu-default", tmp_path) != run


def test_manifest_and_report_from_records(tmp_path):
    prof_path = profiles.resolve("cpu-default")
    prof = profiles.load(prof_path)
    run = evidence.new_run_dir(prof.name, tmp_path)
    import plotly.graph_objects as go

    evidence.write_record(run, "06_tune", {"title": "Demo", "summary": {"elapsed_s": 12.5},
                                           "checks": [Check("c1", "fail", 1, 2, "fix it", "here").to_dict()],
                                           "charts": [evidence.chart_entry("bars", go.Figure(go.Bar(x=[1, 2], y=[2, 3])))]})  # one point: text
    # a record's checks come back as the Checks they were (notebook 07 shows its table from its record)
    assert checks.from_dicts(run_folder.read_records(run)["06_tune"]["checks"]) == [Check("c1", "fail", 1, 2, "fix it", "here")]
    m = manifest.write(run, prof, prof_path, evidence.utc_now(),
                       [{"notebook": "06_tune", "status": "failed", "duration_s": 1.0, "error": "Boom: x"}])
    body = json.loads(m.read_text())
    assert body["status"] == "failed" and body["profile"]["name"] == "cpu-default"
    assert body["host"]["cpu_logical_cores"] >= 1 and body["packages"]["papermill"]
    assert body["records"] == {"06_tune": evidence.sha256_file(run / "records" / "06_tune.json")}  # `lab report` checks them
    html = report.build(run).read_text()
    assert "Boom: x" in html and "fix it" in html
    assert "plotly" in html.lower() and len(html) > 1_000_000  # plotly.js embedded: opens offline


def test_interactive_notebooks_share_one_run_folder_per_profile_and_day(tmp_path, monkeypatch):
    """Opened by hand (run_dir empty), 01 and 06 write to the same folder, so 06 reads 01's bandwidth."""
    monkeypatch.setattr(evidence, "OUTPUTS", tmp_path)
    first = evidence.notebook_run_dir("", "cpu-default")
    again = evidence.notebook_run_dir("", "cpu-default")
    assert first == again and first.parent == tmp_path / "cpu-default"
    assert first.name.startswith("interactive-") and (first / "records").is_dir()
    assert evidence.notebook_run_dir("", "v100-32g-x1") != first
    given = tmp_path / "given"
    assert evidence.notebook_run_dir(str(given), "cpu-default") == given
