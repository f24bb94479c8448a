"""Plan mode (lab.core.planmode): a GPU profile on a machine without its GPUs, or `lab run --plan-only`, measures
nothing, lists the checks it would make as not-run, judges the declared software, predicts speeds with their
uncertainty, and says so in its records, manifest, report and `lab compare`; `lab run`'s exit codes tell a failed
notebook from a failed check."""
import json
import re
from pathlib import Path

import pytest

from lab.core import checks, planmode, profiles, session
from lab.core.checks import Check
from lab.records import batch_run, manifest, report, runner


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as the CI box is: no GPU at all (whatever the test machine has)."""
    monkeypatch.setattr(planmode, "_gpu_names", lambda: ())
    monkeypatch.delenv(planmode.PLAN_ENV, raising=False)


def test_which_runs_are_plan_mode(no_gpu, monkeypatch):
    v100, cpu = profiles.load("v100-32g-x1"), profiles.load("cpu-default")
    assert planmode.reason(v100) == planmode.NOT_HERE and planmode.mode(v100) == "plan"
    assert planmode.reason(cpu) is None and planmode.mode(cpu) == "measure"
    monkeypatch.setattr(planmode, "_gpu_names", lambda: ("Tesla V100-PCIE-32GB",))
    assert planmode.reason(v100) is None  # the profile's card is here: measure
    assert planmode.reason(profiles.load("v100-32g-x2-nvlink")) == planmode.NOT_HERE  # one of its two
    assert planmode.reason(profiles.load("h200-x1")) == planmode.NOT_HERE  # a GPU, not the profile's
    monkeypatch.setenv(planmode.PLAN_ENV, "1")
    assert planmode.reason(cpu) == planmode.ASKED and planmode.reason(v100) == planmode.ASKED  # its V100 is here
    monkeypatch.setattr(planmode, "_gpu_names", lambda: ())
    assert planmode.reason(v100) == planmode.NOT_HERE  # --plan-only too: the missing card is the reason to say


def test_not_run_checks_keep_what_they_expect_and_never_count_as_failures():
    found = [Check("GPU count", "fail", 0, 1, "install the card", "profile"), Check("RAM", "pass", 64, "≥ 32")]
    listed = planmode.not_run(found, planmode.NOT_HERE)
    assert [c.status for c in listed] == ["not-run", "not-run"]
    assert [c.expected for c in listed] == [1, "≥ 32"] and listed[0].source == "profile"
    assert listed[0].observed == f"not run: {planmode.NOT_HERE}"
    assert checks.worst(listed) == "not-run" and checks.worst(listed + [Check("x", "warn", 1, 2)]) == "warn"
    assert checks.worst(listed + [Check("x", "skip", 1, 2)]) == "skip"


def test_records_written_in_plan_mode_say_so(no_gpu, tmp_path, clean_display):
    s = session.start("v100-32g-x1", str(tmp_path / "run"))
    assert s.mode == "plan"
    rec = json.loads(s.record("05_kv_cache", {"summary": {"fits": True}}).read_text())
    assert rec["mode"] == "plan" and rec["plan_reason"] == planmode.NOT_HERE
    cpu = session.start("cpu-default", str(tmp_path / "cpu"))
    assert json.loads(cpu.record("05_kv_cache", {"summary": {}}).read_text())["mode"] == "measure"


def test_02_judges_the_declared_driver_and_toolkit_not_this_machines(no_gpu):
    from lab.measure import install
    from lab.predict import compat

    v100 = profiles.load("v100-32g-x1")
    versions = {"gpus": [], "driver": None, "nvcc": {"version": "13.0"}, "torch": {}, "llama_cpp_python": {},
                "vllm": {}}  # this box's nvcc 13 must not be paired with the profile's driver
    facts = install.machine_facts(v100, versions)
    assert facts["cuda_toolkit"] == "12.8" and facts["driver_version"] == "580.65.06"
    assert set(facts["origin"].values()) == {"declared (plan mode)"}
    rules = {r.id: r.status for r in compat.evaluate_all(facts)}
    assert rules["cuda13_drops_pre_turing"] == "pass" and rules["driver_for_cuda_toolkit"] == "pass"


def test_06_predicts_plain_and_mtp_speeds_with_their_uncertainty():
    from lab.predict import plan_speeds

    rows = plan_speeds.rows(profiles.load("v100-32g-x1"))
    assert [r["what"] for r in rows] == ["one stream, plain (predicted)"] + [
        f"one stream, MTP n-max {n} (predicted)" for n in (1, 2, 3, 4)]
    assert rows[0]["tok_s"] == 34.6 and rows[2]["tok_s"] == 49.5  # lab plan's llama-one / llama-one-mtp (n-max 2)
    # the per-token model's in-sample median 1.5 % (lab/data/public_speed.yaml) and the MTP model's held-out max 21 %
    assert rows[0]["uncertainty"].startswith("±1% typical") and "±21% worst" in rows[2]["uncertainty"]  # held out (mtp_check)
    assert plan_speeds.rows(profiles.load("cpu-default")) == []


def test_offload_warning_is_not_given_when_no_server_ran(no_gpu):
    from lab.measure import gpumon

    check = gpumon.offload_check({}, profiles.load("v100-32g-x1"))
    assert check["status"] == "skip" and planmode.NOT_HERE in check["observed"]


def test_a_users_own_box_with_only_what_they_know_plans_on_the_gpu():
    from lab.predict import plan

    prof = profiles.load("rtx3090-24g-x1")
    assert prof.n_gpu_layers == -1  # left out: every layer on the card
    result = plan.plan(prof)
    assert result["fits"] is True and not [f for f in result["findings"] if f["severity"] == "error"]
    assert round(result["predicted_decode_tok_s"]) == 41  # published 41.3 on a 3090 (lab/data/public_speed.yaml)


def test_exit_codes_tell_notebooks_from_checks():
    ok = runner.SuiteResult(Path("a"))
    bad = runner.SuiteResult(Path("b"), [runner.NotebookResult("04_serve", "failed")], failed_checks=2)
    checked = runner.SuiteResult(Path("c"), failed_checks=7)
    allowed = runner.SuiteResult(Path("d"), failed_checks=7, allow_failed_checks=True)
    assert [r.exit_code for r in (ok, bad, checked, allowed)] == [0, 1, 3, 0]
    assert (runner.EXIT_OK, runner.EXIT_NOTEBOOKS_FAILED, runner.EXIT_USAGE, runner.EXIT_CHECKS_FAILED) == (0, 1, 2, 3)
    assert batch_run.BatchResult({"a": ok, "c": checked}).exit_code == 3
    assert batch_run.BatchResult({"a": ok, "d": allowed}).exit_code == 0
    assert batch_run.BatchResult({"a": ok, "b": bad, "c": checked}, {"x": "invalid"}).exit_code == 12


def test_manifest_status_never_says_ok_over_a_failed_check():
    nbs = [{"status": "ok"}]
    assert manifest.run_status(nbs, {"pass": 59, "warn": 4, "fail": 7}, None, False) == "checks failed"
    assert manifest.run_status(nbs, {"fail": 7}, None, True) == "checks failed (allowed)"
    assert manifest.run_status(nbs + [{"status": "failed"}], {"fail": 7}, None, False) == "failed"
    assert manifest.run_status(nbs, {"pass": 3, "not-run": 20}, None, False) == "ok"
    assert manifest.counts_text({"pass": 59, "warn": 4, "fail": 7, "skip": 0, "not-run": 0}) == "59 pass, 4 warn, 7 fail"


def _run_folder(root: Path, name: str, mode: str, status: str, counts: dict, summary: dict) -> Path:
    run = root / name
    (run / "records").mkdir(parents=True)
    (run / "records" / "06_benchmark.json").write_text(json.dumps({"title": "Benchmark", "mode": mode, "summary": summary}))
    (run / "manifest.json").write_text(json.dumps({"profile": {"name": name}, "status": status, "mode": mode,
                                                   "plan_reason": planmode.NOT_HERE if mode == "plan" else None,
                                                   "check_counts": counts, "notebooks": [{"status": "ok"}]}))
    return run


def test_report_and_compare_never_show_a_prediction_as_a_measurement(tmp_path):
    plan = _run_folder(tmp_path, "v100-32g-x1", "plan", "ok", {"pass": 6, "not-run": 28},
                       {"predicted_decode_tok_s": 34.2, "served_single_stream_decode_tok_s": 0.0})
    real = _run_folder(tmp_path, "cpu-default", "measure", "checks failed", {"pass": 59, "warn": 4, "fail": 7},
                       {"predicted_decode_tok_s": 20.0, "served_single_stream_decode_tok_s": 18.5})
    rows = {(r["record"], r["result"]): r for r in report.compare_rows([plan, real])}
    p, m = "v100-32g-x1/v100-32g-x1", "cpu-default/cpu-default"
    assert rows[("run", "mode")][p] == "plan (predicted, nothing measured)" and rows[("run", "mode")][m] == "measured"
    assert rows[("run", "checks")][m] == "59 pass, 4 warn, 7 fail"
    assert rows[("06_benchmark", "predicted_decode_tok_s")][p] == "34.2 (predicted)"
    assert rows[("06_benchmark", "served_single_stream_decode_tok_s")][p] == "not measured (plan mode)"
    assert rows[("06_benchmark", "served_single_stream_decode_tok_s")][m] == "18.5"  # as the table shows it
    page = report.build(real).read_text()
    h1 = next(line for line in page.splitlines() if line.startswith("<h1>"))
    assert ">checks failed</span>" in h1 and ">ok</span>" not in h1 and "Checks: 59 pass, 4 warn, 7 fail" in page
    page = report.build(plan).read_text()
    assert page.count("this machine is not the profile&#x27;s hardware") == 1 and ">plan</span>" in page


def test_the_answer_of_a_plan_run_says_nothing_was_measured():
    from lab.records import answer

    records = {"06_benchmark": {"mode": "plan", "plan_reason": planmode.NOT_HERE,
                                "summary": {"benchmark_skipped": "plan mode"}}}
    text = answer.markdown(answer.facts(profiles.load("v100-32g-x1"), records))
    assert f"**Plan mode** ({planmode.NOT_HERE}): every number here is predicted" in text
    assert "Measured in this run" not in text


def test_the_report_counts_not_run_checks_as_not_run_never_as_passed():
    """Issue 37: a plan run's notebook 01 read "21 passed checks", all 21 not-run; notebook 02 "14 passed" beside
    "pass 6, skip 14"."""
    found = ([Check(f"gpu {i}", "not-run", "not run: plan mode", "V100", "", "") for i in range(3)]
             + [Check("driver", "pass", "580", "580", "", ""), Check("nvlink", "skip", "one GPU", "n/a", "", "")])
    page = report._checks_html([c.to_dict() for c in found])
    assert "1 passed check:" in page and "3 not run here (plan mode" in page and "1 skipped" in page
    assert "passed checks" not in page
    counted = re.findall(r">([a-z-]+)</span> (\d+)", page)
    assert counted == [("pass", "1"), ("skip", "1"), ("not-run", "3")]


def test_checks_only_the_card_can_answer_are_not_run_in_plan_mode_never_skipped(no_gpu, tmp_path, clean_display):
    """Issue 44: a V100 plan run filed notebook 04's server checks, KV parity, layers on the GPU and the benchmark as
    "skipped (not on this profile or machine)"; they wait for the card: not-run. A skip for another reason stays."""
    s = session.start("v100-32g-x1", str(tmp_path / "run"))
    why = planmode.reason(s.profile)
    found = [Check("server started", "skip", None, None, f"{why}. The server command notebook 04 shows …", "serve"),
             Check("layers and KV cache on the GPU", "skip", f"no server started here ({why})", "all layers", "", "log"),
             Check("GPU pair link", "skip", "1 GPU(s) seen", "-", "a one-GPU profile", "links")]
    rec = json.loads(s.record("04_serve", {"summary": {}, "checks": [c.to_dict() for c in found]}).read_text())
    assert [c["status"] for c in rec["checks"]] == ["not-run", "not-run", "skip"]
    assert rec["checks"][0]["observed"].startswith(f"not run: {why}") and rec["checks"][1]["expected"] == "all layers"
    cpu = session.start("cpu-default", str(tmp_path / "cpu"))  # measuring: a skip stays a skip
    kept = json.loads(cpu.record("04_serve", {"summary": {}, "checks": [found[0].to_dict()]}).read_text())
    assert kept["checks"][0]["status"] == "skip"


def test_a_plan_runs_badge_says_plan_not_a_green_ok():
    assert ">plan</span>" in report.heading_badges("ok", "plan") and ">ok</span>" not in report.heading_badges("ok", "plan")
    failed = report.heading_badges("failed", "plan")
    assert ">failed</span>" in failed and ">plan</span>" in failed
    assert ">ok</span>" in report.heading_badges("ok", "measure")
