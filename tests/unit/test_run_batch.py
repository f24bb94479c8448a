"""`lab run --profile all` (or a,b,c): one run folder per profile, progress across the batch, an invalid profile
reported and skipped, the fleet table (`lab compare` of the runs) and an exit status that says how many profiles
failed (10 + N), or that only checks failed (3). The orchestration in-process with `runner.run` stood in for (unit); one real batch of
notebook 01 (notebooks tier)."""
import json
from pathlib import Path

import yaml
from conftest import ROOT, cli_output

from lab.core import evidence, planmode, profiles
from lab.records import batch_run, runner


def test_batch_profiles_all_is_every_shipped_profile():
    assert batch_run.batch_profiles("all") == [str(p) for p in sorted((ROOT / "params").glob("*.yaml"))]
    assert batch_run.batch_profiles("cpu-default, v100-32g-x1") == ["cpu-default", "v100-32g-x1"]
    assert batch_run.batch_profiles("cpu-default") is None and batch_run.batch_profiles("params/cpu-default.yaml") is None


def test_exit_status_counts_failed_profiles_and_a_cut_batch_exits_as_its_signal():
    ok, bad = runner.SuiteResult(Path("a")), runner.SuiteResult(Path("b"), [runner.NotebookResult("04_serve", "failed")])
    assert batch_run.BatchResult({"a": ok}).exit_code == 0
    batch = batch_run.BatchResult({"a": ok, "b": bad}, {"c": "invalid"})
    assert batch.failed == ["c", "b"] and batch.exit_code == 12  # 10 + 2 profiles
    assert batch_run.BatchResult({f"p{i}": bad for i in range(150)}).exit_code == 110  # never read as 129/130/143
    cut = runner.SuiteResult(Path("c"), interrupted={"signal": "SIGTERM"})
    assert batch_run.BatchResult({"a": ok, "c": cut}, interrupted=cut).exit_code == 143


def fake_run(calls: list):
    """runner.run standing in: a run folder with a manifest and one record whose summary names the profile."""
    def run(profile, only=None, out=None, synth_if_missing=False, plan_only=False, allow_failed_checks=False):
        prof = profiles.load(profile)
        run_dir = evidence.new_run_dir(prof.name, out)
        evidence.write_record(run_dir, "01_hardware", {"title": "Hardware", "summary": {"gpus_seen": prof.gpu_count}})
        status = "failed" if prof.name == "rtx4090-24g" else "ok"
        (run_dir / "manifest.json").write_text(json.dumps({"profile": {"name": prof.name}, "notebooks": [],
                                                           "status": status}))
        calls.append((profile, only, out))
        return runner.SuiteResult(run_dir, [runner.NotebookResult("01_hardware_checks", status)])
    return run


def test_batch_runs_each_profile_skips_an_invalid_one_and_prints_the_fleet_table(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "run", fake_run(calls))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text()),
                                   "parallel_slots": 0}))
    rc, said = cli_output(["run", "--profile", f"cpu-default,{bad},no-such,v100-32g-x1,rtx4090-24g", "--only", "01",
                           "--out", str(tmp_path / "runs")])
    assert rc == 13, said  # 10 + 3: bad.yaml, no-such (both skipped) and rtx4090-24g (its notebook failed)
    assert [c[0] for c in calls] == ["cpu-default", "v100-32g-x1", "rtx4090-24g"]
    assert all(c[1] == ["01"] and c[2] == str(tmp_path / "runs" / Path(c[0]).stem) for c in calls)
    assert "[batch] 1/5 cpu-default ..." in said and "[batch] 5/5 rtx4090-24g: not ok: 01_hardware_checks" in said
    assert "[batch] 4/5 v100-32g-x1 ... (plan mode: this machine is not the profile's hardware" in said or \
        planmode.reason(profiles.load("v100-32g-x1")) is None  # a V100 here measures
    assert f"[batch] 2/5 bad: invalid, skipped: {bad}: 1 problem(s) - field 'parallel_slots'" in said
    assert "[batch] 3/5 no-such: invalid, skipped: unknown profile 'no-such'" in said
    assert "profiles: 5, ok 2, failed 3 (" in said
    # the fleet table: `lab compare` of the three run folders, one column each, a few runs per table (100 columns)
    table = [line.split()[3:] for line in said.splitlines() if line.lstrip().startswith("01_hardware")]
    assert [v for part in table for v in part] == ["0", "1", "1"], table
    headers = [line for line in said.splitlines() if line.lstrip().startswith("Record")]
    assert [h.split("/")[0] for line in headers for h in line.split()[2:]] == ["cpu-default", "v100-32g-x1",
                                                                                "rtx4090-24g"]
    lines = said.splitlines()
    block = lines[lines.index(headers[0]):next(i for i, line in enumerate(lines) if line.startswith("profiles:"))]
    assert block and all(len(line) <= 100 for line in block), block


def test_a_bad_only_is_bad_usage_before_anything_runs(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "run", fake_run(calls))
    rc, said = cli_output(["run", "--profile", "all", "--only", "42", "--out", str(tmp_path)])
    assert rc == 2 and "--only 42: no such notebook" in said and calls == []
