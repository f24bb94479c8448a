"""lab.session, the second cell of every notebook: the profile loaded and validated, the run folder opened, the
display set up the lab's way, and records written into that run with the profile's provenance."""
import json

import pandas as pd
import plotly.io as pio
import pytest
import yaml
from conftest import ROOT

from lab.core import evidence, profiles, run_folder, session


def test_start_opens_the_run_folder_and_records_carry_the_profile(tmp_path, clean_display):
    s = session.start("cpu-default", str(tmp_path / "run"))
    assert s.profile.name == "cpu-default" and s.profile_path == (ROOT / "params" / "cpu-default.yaml").resolve()
    assert s.run_dir == tmp_path / "run" and s.logs == tmp_path / "run" / "logs"
    assert all((s.run_dir / sub).is_dir() for sub in ("records", "notebooks", "logs"))
    # the display: charts as plotly JSON only (no plotly.js in executed notebooks), tables never truncated
    assert pio.renderers.default == "plotly_mimetype" and pd.get_option("display.max_rows") is None
    path = s.record("05_kv_cache", {"summary": {"kv_bytes_per_token": 23_040}})
    rec = json.loads(path.read_text())
    assert path == s.run_dir / "records" / "05_kv_cache.json" and rec["summary"] == {"kv_bytes_per_token": 23_040}
    prov = rec["provenance"]
    assert prov["profile_file"] == str(s.profile_path) and prov["profile_sha256"] == evidence.sha256_file(s.profile_path)
    assert run_folder.read_records(s.run_dir)["05_kv_cache"]["summary"]["kv_bytes_per_token"] == 23_040
    with pytest.raises(ValueError, match="use 'NN_words'"):
        s.record("kv cache", {})


def test_start_takes_a_profile_path_and_refuses_an_invalid_one_naming_it(tmp_path, clean_display):
    data = yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text())
    good = tmp_path / "mine.yaml"
    good.write_text(yaml.safe_dump({**data, "name": "mine"}))
    s = session.start(str(good), str(tmp_path / "run"))
    assert s.profile.name == "mine" and s.profile_path == good.resolve()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**data, "parallel_slots": 0}))
    with pytest.raises(profiles.ProfileError) as err:
        session.start(str(bad), str(tmp_path / "run2"))
    assert str(bad) in str(err.value) and "parallel_slots" in str(err.value)
    assert not (tmp_path / "run2").exists()  # nothing opened for a profile that cannot run


def test_the_notebooks_session_writes_server_scope_into_every_record_and_keeps_the_closing_text(tmp_path, clean_display):
    """lab.pages.session: where the server runs is worked out once at start (lab.serving.endpoint.where) and written
    into every record; a page's closing text is built from the record as written and kept in it, which is what the
    notebook's last cell and report.html show (lab.records.report needs no page code)."""
    from lab import pages
    from lab.pages import session as pages_session
    from lab.records import report

    s = pages_session.start("cpu-default", str(tmp_path / "run"))
    assert s.server_scope["local"] and not s.server_scope["endpoint"] and s.server_scope["text"].startswith("The lab starts")
    seen = []
    path = s.record("05_kv_cache", {"summary": {"n": 3}}, closing=lambda rec: seen.append(rec) or f"n is {rec['summary']['n']}")
    rec = json.loads(path.read_text())
    assert rec["server_scope"] == s.server_scope and rec["what_this_means"] == "n is 3"
    assert seen[0]["record"] == "05_kv_cache" and "provenance" in seen[0]  # built from the file, not the dict passed
    assert pages_session.closing(s, "05_kv_cache").data == "n is 3"
    assert report.closing_text(rec) == "n is 3" and report.closing_text({"record": "06_tune"}) is None
    # a record written before records kept the text: `lab report` passes the pages' closing as the fallback
    older = {"record": "02_install", "checks": []}
    assert report.closing_text(older) is None and report.closing_text({"record": "06_tune"}, pages.closing_text) is None
    assert report.closing_text(older, pages.closing_text).startswith("Everything the profile needs is installed")
    assert "server_scope" not in json.loads(session.start("cpu-default", str(tmp_path / "r2")).record("06_tune", {}).read_text())
    with pytest.raises(FileNotFoundError, match="01_hardware.json: not written yet in this run; run the notebook's record cell"):
        s.read("01_hardware")


# ---------------------------------------------------------------- papermill as its docs show it (-f / -p / -y)
# The injected cell as papermill 2.7 writes it (papermill/translators.py: "# Parameters", then `name = literal`):
# made here by papermill's own translator, so these tests break if papermill changes what it injects.
def injected_cell(parameters: dict) -> str:
    from papermill.translators import translate_parameters

    return translate_parameters("llm-lab", "python", parameters, "Parameters")


def shipped(name: str) -> dict:
    return yaml.safe_load((ROOT / "params" / f"{name}.yaml").read_text())


def kernel_globals(parameters: dict | None, profile: str = "cpu-default", run_dir: str = "") -> dict:
    """A notebook kernel's globals at its session cell: IPython's input history `In` (the parameters cell, papermill's
    injected cell when given, this cell), the parameters as the kernel holds them, and names IPython and imports add."""
    history = ["", 'profile: str = "cpu-default"\nrun_dir: str = ""']
    if parameters is not None:
        history.append(injected_cell(parameters))
    history.append("from lab.core import session\ns = session.start(globals())")
    return {"In": history, "Out": {}, "_": "", "get_ipython": print, "session": session,
            "profile": (parameters or {}).get("profile", profile), "run_dir": (parameters or {}).get("run_dir", run_dir),
            **{k: v for k, v in (parameters or {}).items() if k not in ("profile", "run_dir")}}


def test_papermill_injected_cell_reads_back_as_the_yaml_papermill_read():
    data = shipped("v100-32g-x1")
    ns = kernel_globals(data)
    source = session.injected_source(ns)
    assert source.startswith("# Parameters\nname = \"v100-32g-x1\"\n")
    assert session.parse_injected(source) == data
    assert session.injected_source(kernel_globals(None)) is None  # opened by hand: nothing injected
    assert session.injected_source({}) is None  # not a kernel (no input history)
    # values papermill writes that are not plain literals are named, not evaluated
    with pytest.raises(profiles.ProfileError, match=r"papermill parameter 'port': float\('nan'\) is not a plain value"):
        session.parse_injected(injected_cell({"port": float("nan")}))


@pytest.mark.parametrize("case, injected, expected", [
    ("opened by hand", None, session.Choice("cpu-default", None, "")),
    ("lab run", {"profile": "/p/v.yaml", "run_dir": "/r"}, session.Choice("cpu-default", None, "")),
    ("-p profile", {"profile": "v100-32g-x1"}, session.Choice("cpu-default", None, "")),
    ("-f yaml", {"name": "x", "gpu_count": 0}, session.Choice(None, {"name": "x", "gpu_count": 0}, "")),
    ("-f yaml -p run_dir --inject-paths", {"name": "x", "run_dir": "/r", "PAPERMILL_INPUT_PATH": "a.ipynb",
                                            "PAPERMILL_OUTPUT_PATH": "b.ipynb"}, session.Choice(None, {"name": "x"}, "")),
])
def test_decide_which_profile_runs(case, injected, expected):
    # decide takes the kernel's `profile`/`run_dir` (papermill's values once injected) and the injected mapping
    assert session.decide("cpu-default", "", injected) == expected, case


def test_decide_refuses_profile_and_settings_together():
    with pytest.raises(profiles.ProfileError) as err:
        session.decide("v100-32g-x1", "", {**shipped("v100-32g-x1"), "profile": "v100-32g-x1"})
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("papermill injected both profile='v100-32g-x1' and profile settings (name, description, "
                          "gpu_name_pattern, gpu_count, … 30 in all): give one")
    assert "-f params/NAME.yaml" in msg and "-p profile NAME" in msg


def test_decide_names_unknown_parameters_with_the_nearest_known_one():
    with pytest.raises(profiles.ProfileError) as err:
        session.decide("cpu-default", "", {**shipped("cpu-default"), "gpu_memory_utilisation": 0.8, "zzz": 1})
    assert str(err.value) == (
        "papermill parameter 'gpu_memory_utilisation' is neither a notebook parameter (profile, run_dir) nor a profile "
        "setting — did you mean 'gpu_memory_utilization'?; papermill parameter 'zzz' is neither a notebook parameter "
        "(profile, run_dir) nor a profile setting")
    with pytest.raises(profiles.ProfileError, match="did you mean 'profile'"):
        session.decide("cpu-default", "", {"profil": "v100-32g-x1"})
    with pytest.raises(profiles.ProfileError, match="no profile: the notebook's `profile` parameter is None"):
        session.decide(None, "", None)


def test_start_builds_the_profile_papermill_injected_and_keeps_a_copy_of_it(tmp_path, clean_display):
    data = shipped("v100-32g-x1")
    s = session.start(kernel_globals({**data, "run_dir": str(tmp_path / "run")}))
    assert s.profile == profiles.load("v100-32g-x1")  # the same profile as the file papermill read
    assert s.run_dir == tmp_path / "run"
    # the run folder keeps exactly what was injected, and the records' provenance names that copy
    assert s.profile_path.parent == s.run_dir and s.profile_path.name.startswith("profile-v100-32g-x1-injected-")
    assert yaml.safe_load(s.profile_path.read_text()) == data and profiles.load(s.profile_path) == s.profile
    prov = json.loads(s.record("01_hardware", {"summary": {}}).read_text())["provenance"]
    assert prov["profile_file"] == str(s.profile_path) and prov["profile_sha256"] == evidence.sha256_file(s.profile_path)
    # the same settings again: the same copy; other settings: another copy beside it (records keep their sha256)
    again = session.start(kernel_globals({**data, "run_dir": str(tmp_path / "run")}))
    other = session.start(kernel_globals({**data, "threads": 8, "run_dir": str(tmp_path / "run")}))
    assert again.profile_path == s.profile_path and other.profile_path != s.profile_path
    assert other.profile.threads == 8 and len(list(s.run_dir.glob("profile-*.yaml"))) == 2
    # `-p profile X` (and `lab run`) still name the profile file itself
    by_name = session.start(kernel_globals({"profile": "v100-32g-x1", "run_dir": str(tmp_path / "run2")}))
    assert by_name.profile_path == (ROOT / "params" / "v100-32g-x1.yaml").resolve()


def test_injected_settings_get_the_errors_lab_validate_gives_the_file(tmp_path, clean_display):
    data = {**shipped("cpu-default"), "parallel_slots": 0, "gpu_vram_mib": 1024}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(profiles.ProfileError) as by_file:
        profiles.load(bad)
    with pytest.raises(profiles.ProfileError) as injected:
        session.start(kernel_globals({**data, "run_dir": str(tmp_path / "run")}))
    assert str(injected.value) == str(by_file.value).replace(str(bad), "papermill's injected parameters")
    assert "parallel_slots" in str(injected.value) and not (tmp_path / "run").exists()
    # `-p KEY VALUE` alone changes that setting of the profile the notebook names (issue 37: a learner's
    # `-p context_tokens 16384` listed eight "missing; it is required" fields before the real hint)
    s = session.start(kernel_globals({"context_tokens": 16384, "run_dir": str(tmp_path / "run")}))
    assert (s.profile.name, s.profile.context_tokens) == ("cpu-default", 16384)
    assert yaml.safe_load(s.profile_path.read_text())["context_tokens"] == 16384  # the settings the run used
    with pytest.raises(profiles.ProfileError) as one:
        session.start(kernel_globals({"profile": "v100-32g-x1", "threads": 0, "run_dir": str(tmp_path / "run")}))
    said = str(one.value)
    assert said.startswith(f"{ROOT / 'params' / 'v100-32g-x1.yaml'} with -p threads 0: 1 problem(s)")
    assert "field 'threads'" in said and "missing" not in said


def test_a_parameters_cell_re_run_by_hand_after_the_injected_one_is_not_silently_overruled(tmp_path, clean_display):
    # JupyterLab, an executed notebook: papermill's cell (v100 settings) ran, then the user edited `profile` in the
    # parameters cell and re-ran it, then the session cell: which profile is meant cannot be told, so it is asked
    ns = kernel_globals({**shipped("v100-32g-x1"), "run_dir": str(tmp_path / "run")})
    ns["In"].insert(-1, 'profile: str = "rtx4090-24g"\nrun_dir: str = ""')
    ns["profile"] = "rtx4090-24g"
    assert session.set_after_injection(ns) == ["profile", "run_dir"]
    with pytest.raises(profiles.ProfileError, match=r"^profile='rtx4090-24g' was set by a cell run after papermill's "
                                                    r"injected parameters .*re-run the injected-parameters cell"):
        session.start(ns)
    # after `lab run` (profile and run_dir injected, no settings) the re-run parameters cell simply counts
    ns = kernel_globals({"profile": "v100-32g-x1", "run_dir": str(tmp_path / "run2")})
    ns["In"].insert(-1, 'profile: str = "cpu-default"\nrun_dir: str = ""')
    ns["profile"], ns["run_dir"] = "cpu-default", str(tmp_path / "run2")
    assert session.start(ns).profile.name == "cpu-default"
    assert session.set_after_injection(kernel_globals({**shipped("v100-32g-x1")})) == []
