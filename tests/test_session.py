"""lab.session, the second cell of every notebook: the profile loaded and validated, the run folder opened, the
display set up the lab's way, and records written into that run with the profile's provenance."""
import json

import pandas as pd
import plotly.io as pio
import pytest
import yaml
from conftest import ROOT

from lab.core import evidence, profiles, session


@pytest.fixture
def clean_display(monkeypatch):
    """session.start sets pandas and plotly options for the whole process (as a kernel wants): put them back."""
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    with pd.option_context("display.max_rows", 60, "display.max_colwidth", 50, "display.max_columns", 20,
                           "display.width", 80):
        yield


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
    assert evidence.read_records(s.run_dir)["05_kv_cache"]["summary"]["kv_bytes_per_token"] == 23_040
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
