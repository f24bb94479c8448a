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
    path = s.record("05_kv_cache", {"summary": {"max_concurrent_sequences": 3}},
                    closing=lambda rec: seen.append(rec) or f"n is {rec['summary']['max_concurrent_sequences']}")
    rec = json.loads(path.read_text())
    assert rec["server_scope"] == s.server_scope and rec["what_this_means"] == "n is 3"
    assert seen[0]["record"] == "05_kv_cache" and "provenance" in seen[0]  # built from the record as written, not the dict passed
    assert pages_session.closing(s, "05_kv_cache").data == "n is 3"
    assert report.closing_text(rec) == "n is 3" and report.closing_text({"record": "06_tune"}) is None
    # a record written before records kept the text: `lab report` passes the pages' closing as the fallback
    older = {"record": "02_install", "checks": []}
    assert report.closing_text(older) is None and report.closing_text({"record": "06_tune"}, pages.closing_text) is None
    assert report.closing_text(older, pages.closing_text).startswith("Everything the profile needs is installed")
    assert "server_scope" not in json.loads(session.start("cpu-default", str(tmp_path / "r2")).record("06_tune", {}).read_text())
    with pytest.raises(FileNotFoundError, match="01_hardware.json: not written yet in this run; run the notebook's record cell"):
        s.read("01_hardware")


# ---------------------------------------------------------------- the profile arrives once: the notebook's parameters
def shipped(name: str) -> dict:
    return yaml.safe_load((ROOT / "params" / f"{name}.yaml").read_text())


def test_lab_run_passes_the_validated_profile_and_the_kernel_reads_no_file(tmp_path, clean_display, monkeypatch):
    # `lab run` passes profiles.settings(prof): the kernel validates that mapping and never opens the profile file
    prof = profiles.load("v100-32g-x1")
    given = profiles.settings(prof)
    json.dumps(given)  # plain JSON values: papermill writes them into the injected cell as literals
    parsed = []
    monkeypatch.setattr(session.profile_file, "parse", lambda path: parsed.append(path) or {})
    s = session.start(str(ROOT / "params" / "v100-32g-x1.yaml"), str(tmp_path / "run"), given)
    assert s.profile == prof and parsed == []
    # the run folder keeps exactly the settings the kernel ran with, and the records' provenance names that copy
    assert s.profile_path.parent == s.run_dir and s.profile_path.name.startswith("profile-v100-32g-x1-settings-")
    assert yaml.safe_load(s.profile_path.read_text()) == given
    prov = json.loads(s.record("01_hardware", {"summary": {}}).read_text())["provenance"]
    assert prov["profile_file"] == str(s.profile_path) and prov["profile_sha256"] == evidence.sha256_file(s.profile_path)
    # the next notebook of the run: the same copy; other settings: another copy beside it (records keep their sha256)
    again = session.start("v100-32g-x1", str(tmp_path / "run"), given)
    other = session.start("v100-32g-x1", str(tmp_path / "run"), {**given, "threads": 8})
    assert again.profile_path == s.profile_path and other.profile_path != s.profile_path
    assert other.profile.threads == 8 and len(list(s.run_dir.glob("profile-*.yaml"))) == 2


@pytest.mark.parametrize("name", [p.stem for p in profiles.all_profiles()])
def test_every_shipped_profile_survives_the_trip_to_the_kernel(name):
    prof = profiles.load(name)
    assert profiles.from_data(json.loads(json.dumps(profiles.settings(prof))), "settings") == prof


def test_opened_by_hand_the_notebook_loads_the_profile_its_parameters_cell_names(tmp_path, clean_display):
    s = session.start("v100-32g-x1", str(tmp_path / "run"), {})
    assert s.profile == profiles.load("v100-32g-x1")
    assert s.profile_path == (ROOT / "params" / "v100-32g-x1.yaml").resolve()  # no copy: the file names it
    assert list(s.run_dir.glob("profile-*.yaml")) == []
    with pytest.raises(profiles.ProfileError, match="no profile: the notebook's `profile` parameter is ''"):
        session.start("", str(tmp_path / "run"), {})


def test_settings_get_the_errors_lab_validate_gives_the_file(tmp_path, clean_display):
    data = {**shipped("cpu-default"), "parallel_slots": 0, "gpu_vram_mib": 1024}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(profiles.ProfileError) as by_file:
        profiles.load(bad)
    with pytest.raises(profiles.ProfileError) as given:
        session.start("cpu-default", str(tmp_path / "run"), data)
    assert str(given.value) == str(by_file.value).replace(str(bad), "the notebook's `settings` parameter")
    assert "parallel_slots" in str(given.value) and not (tmp_path / "run").exists()
    # settings without `name` change those settings of the profile the notebook names (-y "settings: {...}")
    s = session.start("cpu-default", str(tmp_path / "run"), {"context_tokens": 16384})
    assert (s.profile.name, s.profile.context_tokens) == ("cpu-default", 16384)
    assert yaml.safe_load(s.profile_path.read_text())["context_tokens"] == 16384  # the settings the run used
    with pytest.raises(profiles.ProfileError) as one:
        session.start("v100-32g-x1", str(tmp_path / "run"), {"threads": 0})
    said = str(one.value)
    assert said.startswith(f"{ROOT / 'params' / 'v100-32g-x1.yaml'} with settings threads: 0: 1 problem(s)")
    assert "field 'threads'" in said and "missing" not in said
    with pytest.raises(profiles.ProfileError, match="did you mean 'gpu_memory_utilization'"):
        session.start("cpu-default", str(tmp_path / "run"), {"gpu_memory_utilisation": 0.8})
    with pytest.raises(profiles.ProfileError, match=r"`settings` parameter is str 'threads: 8', not a mapping"):
        session.start("cpu-default", str(tmp_path / "run"), "threads: 8")


def test_a_profile_papermill_injected_as_variables_is_the_profile_run(tmp_path, clean_display):
    # papermill -f params/X.yaml: the profile's keys become the kernel's variables; that profile runs, validated as
    # any profile, and its records name the shipped file (as -p profile X would)
    kernel = {"In": ["# Parameters\nname = 'v100-32g-x1'"], "profile": "cpu-default", "run_dir": "", "settings": {},
              **shipped("v100-32g-x1")}
    s = session.start("cpu-default", str(tmp_path / "run"), {}, namespace=kernel)
    assert s.profile.name == "v100-32g-x1" and s.profile_path == (ROOT / "params" / "v100-32g-x1.yaml").resolve()
    # with -y settings over it: that profile changed, kept as a copy named by the profile
    s = session.start("cpu-default", str(tmp_path / "run"), {"threads": 2}, namespace=kernel)
    assert (s.profile.name, s.profile.threads) == ("v100-32g-x1", 2)
    assert s.profile_path.name.startswith("profile-v100-32g-x1-settings-")
    assert session.profile_name_of(s.profile_path) == "v100-32g-x1"
    # a bad value injected is refused as a bad file's would be, naming the field
    with pytest.raises(profiles.ProfileError, match=r"^the profile papermill passed as parameters \(-f FILE\): 1 pro"):
        session.start("cpu-default", str(tmp_path / "run"), {}, namespace={**kernel, "threads": 0})
    # a learner's section values (context_tokens = 131072 in notebook 05) are not a profile injected
    learner = {"profile": "cpu-default", "context_tokens": 131072, "parallel_slots": 2}
    assert session.injected_profile(learner) is None
    assert session.start("cpu-default", str(tmp_path / "run"), {}, namespace=learner).profile.name == "cpu-default"


def test_two_papermill_runs_without_a_run_folder_get_one_each(tmp_path, clean_display, monkeypatch):
    from lab.core import evidence

    monkeypatch.setattr(evidence, "OUTPUTS", tmp_path)
    kernel = {"In": ["# Parameters\nprofile = 'cpu-default'\n"], "profile": "cpu-default"}
    one = session.start("cpu-default", "", {}, namespace=kernel).run_dir
    two = session.start("cpu-default", "", {}, namespace=kernel).run_dir
    assert one != two and one.parent == two.parent == tmp_path / "cpu-default"
    assert one.name.startswith("papermill-") and (one / "records").is_dir()
    # a notebook opened by hand (no injected cell) keeps the day's shared folder
    by_hand = session.start("cpu-default", "", {}, namespace={"In": ["profile = 'x'"]}).run_dir
    assert by_hand.name.startswith("interactive-")
    assert session.profile_name_of("/x/params/h200-x1.yaml") == "h200-x1"