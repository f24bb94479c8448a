"""Issue 45 (hostile inputs, round four), what a user hands the lab:

3. a record that fails its schema is written anyway, marked invalid with the reasons, and its write raises (the
   notebook fails loudly); report and compare flag it;
4. an exposed bind needs a key variable that names a secret (never PATH, HOME, ...) holding a value that looks like
   one, wherever the settings came from; no profile message carries a file's lines or a setting that may be a key;
5. the report checks each input file (the settings copy, the profile) against the sha256 the run recorded and says
   "changed after the run" instead of rebuilding from today's file;
6. every file the lab writes into a run folder goes through evidence.write_whole or evidence.open_stream;
8. an interrupted run (SIGINT, SIGTERM, SIGQUIT, cut before its manifest) is never reported complete;
9. compare is linear in summary keys; control characters of a handed-over folder never reach the terminal; a record
   of a newer schema is said to be one.
Each item prints tried / handled."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, cli_output, record_figure
from shared_reliability_hostile_servers import ESCAPES, KEY

from lab.core import evidence, interrupt, profiles, record_schema, run_folder, session
from lab.serving import engines, serve

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _run_folder(tmp_path: Path, name: str = "20261207T120000Z_abcdef12", **manifest) -> Path:
    run = tmp_path / name
    (run / "records").mkdir(parents=True)
    evidence.write_record(run, "06_tune", {"title": "Tune", "summary": {"points_ok": 3}})
    body = {"run_id": run.name, "profile": {"name": "t"}, "notebooks": [{"notebook": "06_benchmarking", "status": "ok"}],
            "status": "ok", "records": evidence.record_hashes(run), **manifest}
    (run / "manifest.json").write_text(json.dumps(body))
    return run


# ---------------------------------------------------------------- 3. a record that fails its schema
def test_a_record_that_fails_its_schema_is_written_marked_invalid_and_fails_loudly(tmp_path):
    cases = {"unknown summary key": ("06_tune", {"summary": {"points_okk": 3}}),
             "unknown top-level key": ("06_tune", {"summary": {}, "new_section": [1]}),
             "unknown record name": ("06_tuned", {"summary": {"x": 1}}),
             "GPU figure of the wrong shape": ("06_benchmark", {"sweep": [{"mean_power_w": [486.7]}]}),
             "closing text that fails on it": ("06_tune", {"summary": {"points_okk": 3}, "closing": True})}
    handled, problems = 0, []
    for i, (case, (name, data)) in enumerate(cases.items()):
        run = _run_folder(tmp_path, f"run{i}")
        closing = (lambda rec: rec["summary"]["points_ok"]) if data.pop("closing", False) else None
        with pytest.raises(record_schema.RecordSchemaError) as raised:
            evidence.write_record(run, name, data, closing=closing)
        kept = run_folder.read_records(run).get(name) or {}
        rc, text = cli_output(["report", str(run)])
        page = (run / "report.html").read_text()
        rc2, compared = cli_output(["compare", str(run), str(tmp_path / "run0")])
        ok = ("written, marked invalid" in str(raised.value) and kept.get("invalid", {}).get("reasons")
              and "marked invalid when written" in page and "marked invalid when written" in compared
              and "Traceback" not in text + compared)
        handled += bool(ok)
        if not ok:
            problems.append(f"{case}: {raised.value} / {kept.get('invalid')} / {text[-200:]} / {compared[-300:]}")
    record_figure("issue 45 item 3: a record that fails its schema: written, marked invalid, loud", len(cases), handled)
    assert handled == len(cases), "\n".join(problems)


# ---------------------------------------------------------------- 4. exposure and secrets through settings
WELL_KNOWN = ["PATH", "HOME", "USER", "SHELL", "LANG", "TERM", "PWD", "LOGNAME", "SSH_AUTH_SOCK", "LD_LIBRARY_PATH",
              "TMPDIR", "HOSTNAME", "MY_SERVER"]  # the last: a name that does not say it holds a secret


def test_an_exposed_bind_needs_a_secret_variable_holding_a_secret_wherever_settings_come_from(tmp_path, monkeypatch):
    base = profiles.settings(profiles.load("cpu-default"))
    path = profiles.resolve("cpu-default")
    results = {}
    for var in WELL_KNOWN:
        exposed = {"host": "0.0.0.0", "api_key_env": var}
        refused = []
        try:
            profiles.Profile(**{**base, **exposed})
        except ValueError:
            refused.append("schema")
        try:
            session.chosen_profile(str(path), exposed)  # papermill -y "settings: {...}"
        except profiles.ProfileError:
            refused.append("-y settings")
        file = tmp_path / f"{var.lower()}.yaml"
        file.write_text(yaml.safe_dump({**base, "name": var.lower().replace("_", "-"), **exposed}))
        try:
            profiles.load(file)
        except profiles.ProfileError:
            refused.append("profile file")
        copied = profiles.load("cpu-default").model_copy(update=exposed)  # a copy skips validation: start refuses
        try:
            serve.check_bind_allowed(engines.build_command(copied, model_path="/m.gguf"))
        except serve.UnsafeBind:
            refused.append("bind")
        results[f"api_key_env {var}"] = len(refused) == 4
    weak = {"16 of one letter": "k" * 16, "a path": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "a sentence": "my server key is this", "short": "s3cr3t", "two letters": "abababababababababab",
            "hex of a counter": "0123456789012345"}
    prof = profiles.Profile(**{**base, "host": "0.0.0.0", "api_key_env": "ROUND4_BIND_KEY"})
    for what, value in weak.items():
        monkeypatch.setenv("ROUND4_BIND_KEY", value)
        try:
            serve.check_bind_allowed(engines.build_command(prof, model_path="/m.gguf"))
            results[f"key {what}"] = False
        except serve.UnsafeBind as exc:
            results[f"key {what}"] = value not in str(exc)  # refused, never saying the value
    monkeypatch.setenv("ROUND4_BIND_KEY", "Zq3x9VbN7mKp2Lr8Tw5YhG4dF6sA")
    serve.check_bind_allowed(engines.build_command(prof, model_path="/m.gguf"))
    results["a random key: allowed"] = True
    record_figure("issue 45 item 4: an exposed bind: the key variable and its value, from a file, -y and a copy",
                  len(results), sum(results.values()),
                  "not handled: " + ", ".join(k for k, v in results.items() if not v) if not all(results.values()) else "")
    assert all(results.values()), results


SHADOW = ("root:$6$Zq3x9VbN$Kp2Lr8Tw5YhG4dF6sA1cE0uJ3iO7pL2kM9nB5vC8xZ1qW4eR6tY0u:19000:0:99999:7:::\n"
          "daemon: *:19000:0:99999:7:::\nbin: hunter2hunter2hunter2\n")


def test_no_profile_message_carries_a_files_lines_or_a_setting_that_may_be_a_key(tmp_path, capsys):
    from lab.predict import predict_cli

    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    linked = tmp_path / "prof.yaml"
    linked.symlink_to(shadow)
    yaml_shadow = tmp_path / "passwd.yaml"  # the same lines, named .yaml: parsed, never echoed
    yaml_shadow.write_text(SHADOW + "".join(f"user{i}: x:{1000 + i}:{1000 + i}::/home/u{i}:/bin/sh\n" for i in range(12)))
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"name: x\napi_key: [{KEY}\n")  # a YAML error on the key's line
    base = profiles.settings(profiles.load("cpu-default"))
    secret_words = [KEY, "hunter2hunter2", "Zq3x9VbN", "19000:0:99999", "/home/u3"]
    said = {}
    for what, target in (("a link to a shadow file", linked), ("the shadow file itself", shadow),
                         ("shadow lines in a .yaml", yaml_shadow), ("a YAML error on a key's line", broken)):
        try:
            profiles.load(target)
            said[what] = "(loaded)"
        except profiles.ProfileError as exc:
            said[what] = str(exc)
    for what, settings in (("-y server_args with --api-key", {"server_args": ["--api-key", KEY]}),
                           ("-y server_args with --api-key=K", {"server_args": [f"--api-key={KEY}"]}),
                           ("-y server_args with a control character", {"server_args": ["-b", KEY + "\x07"]}),
                           ("-y endpoint_url with user:password", {"endpoint_url": f"http://u:{KEY}@h:1/v1",
                                                                   "served_model": "m"}),
                           ("-y settings as a string", f"--api-key {KEY}")):
        try:
            session.chosen_profile("cpu-default", settings)
            said[what] = "(accepted)"
        except profiles.ProfileError as exc:
            said[what] = str(exc)
    try:
        profiles.from_data({**base, "server_args": ["--api-key", KEY]}, "lab run's settings")
    except profiles.ProfileError as exc:
        said["a whole profile's settings with a key"] = str(exc)
    for what, target in (("predict --rows on the link", linked), ("predict --rows on the file", shadow)):
        rc = predict_cli.main(["--rows", str(target)])
        out, err = capsys.readouterr()
        said[what] = f"rc {rc}: {out}{err}"
    leaked = {w: [s for s in secret_words if s in text] for w, text in said.items()}
    handled = sum(not v and "(loaded)" not in said[w] and "(accepted)" not in said[w] for w, v in leaked.items())
    record_figure("issue 45 item 4: profile and rows messages without a file's lines or a key", len(said), handled,
                  "leaked: " + "; ".join(f"{w}: {v}" for w, v in leaked.items() if v) if handled < len(said) else "")
    assert handled == len(said), {w: said[w][:300] for w, v in leaked.items() if v}


# ---------------------------------------------------------------- 5. inputs changed after the run
def test_the_report_says_an_input_changed_after_the_run_instead_of_rebuilding_from_it(tmp_path):
    results = {}
    for case in ("unchanged", "edited", "deleted", "replaced by a device"):
        run = tmp_path / case.split()[0] / "20261207T120000Z_abcdef12"
        (run / "records").mkdir(parents=True)
        settings = profiles.settings(profiles.load("v100-32g-x1"))
        copy = session.settings_copy(settings, run, "v100-32g-x1")
        evidence.write_record(run, "05_kv_cache", {"title": "KV", "summary": {"kv_dtype": "f16"}}, copy)
        (run / "manifest.json").write_text(json.dumps({
            "run_id": run.name, "profile": {"name": "v100-32g-x1", "file": str(copy),
                                            "sha256": evidence.sha256_file(copy)},
            "notebooks": [], "status": "ok", "records": evidence.record_hashes(run)}))
        if case == "edited":
            copy.write_text(copy.read_text().replace("context_tokens: ", "context_tokens: 1"))
        elif case == "deleted":
            copy.unlink()
        elif case.startswith("replaced"):
            copy.unlink()
            copy.symlink_to("/dev/zero")
        rc, text = cli_output(["report", str(run)])
        page = (run / "report.html").read_text()
        said = "changed after the run" in page
        results[case] = (said == (case != "unchanged")) and "Traceback" not in text
    record_figure("issue 45 item 5: input files checked against the run's sha256 by lab report", len(results),
                  sum(results.values()))
    assert all(results.values()), results


# ---------------------------------------------------------------- 6. one no-follow writer
# Where lab/ may still write a file another way, and why: the writers themselves (evidence), set-up (standard library only, no run folder), the lab's cache, not a run folder
# (manifest's sha256 cache, quant_ladder's and hf_standin's products, peer_tools' book, wheel_arch's unpacked wheel),
# a profile the user names (`lab tune --write-profile`), Chromium's own temporary folder.
ALLOWED_WRITES = {"lab/core/evidence.py", "lab/records/manifest.py", "lab/model/quant_ladder.py",
                  "lab/model/hf_standin.py", "lab/measure/peer_tools.py", "lab/measure/wheel_arch.py",
                  "lab/experiments/tune.py", "lab/records/browser.py"}
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*,\s*['\"](?:w|a|x)b?['\"]")


def test_every_run_folder_file_goes_through_the_one_no_follow_writer(tmp_path):
    found = {str(p.relative_to(ROOT)): len(WRITES.findall(p.read_text())) for p in (ROOT / "lab").rglob("*.py")
             if "/setup/" not in str(p)}
    stray = sorted(f for f, n in found.items() if n and f not in ALLOWED_WRITES)
    results = {"no stray writer in lab/": not stray}
    victim = tmp_path / "users-file.txt"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    settings = {"name": "cpu-default", "threads": 2}
    body = yaml.safe_dump(settings, sort_keys=False, allow_unicode=True)
    import hashlib
    target = run / f"profile-cpu-default-settings-{hashlib.sha256(body.encode()).hexdigest()[:12]}.yaml"
    target.with_name(target.name + ".partial").symlink_to(victim)
    session.settings_copy(settings, run, "cpu-default")
    results["settings copy: a planted .partial link"] = victim.read_text() == "precious\n" and target.is_file()
    for plant in ("symlink", "hard link", "fifo"):
        log = run / f"{plant.replace(' ', '-')}.log"
        if plant == "symlink":
            log.symlink_to(victim)
        elif plant == "hard link":
            os.link(victim, log)
        else:
            os.mkfifo(log)
        with evidence.open_stream(log) as fh:
            fh.write(b"tool output\n")
        results[f"stream: a planted {plant}"] = (victim.read_text() == "precious\n" and log.is_file()
                                                 and not log.is_symlink() and log.read_bytes() == b"tool output\n")
    raw = run / ".server.log.partial"  # a server's raw log (lab.serving.serve.start): owner-only, created anew
    raw.symlink_to(victim)
    with evidence.open_stream(raw, private=True) as fh:
        fh.write(b"key in the clear\n")
    results["a server's raw log: a planted link"] = (victim.read_text() == "precious\n" and not raw.is_symlink()
                                                    and raw.stat().st_mode & 0o077 == 0)
    record_figure("issue 45 item 6: run-folder files through the one no-follow writer", len(results),
                  sum(results.values()), f"stray writers: {stray}" if stray else "")
    assert all(results.values()), (results, stray)


# ---------------------------------------------------------------- 8. interrupted runs
def test_an_interrupted_run_is_never_reported_complete(tmp_path):
    cases = {f"manifest: interrupted by {sig}": {"status": "interrupted", "interrupted": {
        "signal": sig, "utc": "2026-12-07T12:00:00Z", "notebook": "06_benchmarking", "during": "a notebook"}}
        for sig in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")}
    cases["manifest: status ok, a notebook not run"] = {"notebooks": [{"notebook": "06_benchmarking", "status": "ok"},
                                                                      {"notebook": "07_troubleshooting",
                                                                       "status": "not run"}]}
    cases["manifest: status edited to ok, interrupted kept"] = {"interrupted": {"signal": "SIGTERM"}}
    cases["cut before its manifest (SIGKILL)"] = None
    results = {}
    for i, (case, manifest) in enumerate(cases.items()):
        run = _run_folder(tmp_path / str(i), **(manifest or {}))
        if manifest is None:
            (run / "manifest.json").unlink()
        rc, text = cli_output(["report", str(run)])
        rc2, doc = cli_output(["doctor", "--run", str(run)])
        results[case] = (rc == 1 and rc2 == 1 and "No known problem found." not in doc and "Not a complete run" in doc
                         and "Traceback" not in text + doc)
    complete = _run_folder(tmp_path / "fine")
    rc, _ = cli_output(["report", str(complete)])
    results["a complete run: exit 0"] = rc == 0 and run_folder.not_complete(complete) is None
    old = interrupt.install()
    try:
        os.kill(os.getpid(), signal.SIGQUIT)
        time.sleep(0.5)
        results["SIGQUIT unwinds (a manifest is written)"] = False
    except KeyboardInterrupt as exc:
        results["SIGQUIT unwinds (a manifest is written)"] = interrupt.name_of(exc) == "SIGQUIT" and \
            interrupt.SIGNAL_EXIT["SIGQUIT"] == 131
    finally:
        interrupt.restore_handlers(old)
    record_figure("issue 45 item 8: interrupted runs (report and doctor --run exit 1, say why)", len(results),
                  sum(results.values()))
    assert all(results.values()), results


# ---------------------------------------------------------------- 9. smaller
def test_compare_is_linear_strips_control_characters_and_names_a_newer_schema(tmp_path):
    results = {}
    many = _run_folder(tmp_path, "20261207T120000Z_many0001")
    summary = {f"k{i:05d}": i for i in range(20_000)}
    body = {"schema_version": evidence.SCHEMA_VERSION, "record": "06_tune", "title": "t", "summary": summary}
    (many / "records" / "06_tune.json").write_text(json.dumps(body))
    other = _run_folder(tmp_path, "20261207T120000Z_other001")
    t0 = time.monotonic()
    rc, text = cli_output(["compare", str(many), str(other)])
    took = time.monotonic() - t0
    results["20,000 summary keys"] = rc == 0 and took < 60 and "k19999" in cli_output(
        ["compare", "--all", str(many), str(other)])[1].lower()

    hostile = _run_folder(tmp_path, "20261207T120000Z_hostile1", status="ok" + "".join(ESCAPES.values()),
                          interrupted={"signal": "SIGTERM" + ESCAPES["OSC 52 clipboard (BEL)"],
                                       "during": "x" + ESCAPES["lone CR"]})
    rec = {"schema_version": evidence.SCHEMA_VERSION, "record": "06_tune", "title": "t" + ESCAPES["CSI clear screen"],
           "summary": {"points_ok" + ESCAPES["OSC 0 title"]: "3" + ESCAPES["colour"]},
           "findings": [{"severity": "error", "entry": "x", "evidence": "e" + ESCAPES["OSC 8 link"]}]}
    (hostile / "records" / "06_tune.json").write_text(json.dumps(rec))
    for verb in (["compare", str(hostile), str(other)], ["compare", "--all", str(hostile)], ["doctor", "--run", str(hostile)],
                 ["report", str(hostile)]):
        rc, text = cli_output(verb)
        results[" ".join(verb[:2 if verb[1].startswith("-") else 1])] = not CONTROL.search(text) and "Traceback" not in text

    newer = _run_folder(tmp_path, "20261207T120000Z_newer001")
    rec = {"schema_version": evidence.SCHEMA_VERSION + 1, "record": "06_tune", "title": "t", "summary": {"points_ok": 3}}
    (newer / "records" / "06_tune.json").write_text(json.dumps(rec))
    cli_output(["report", str(newer)])
    rc, compared = cli_output(["compare", str(newer), str(other)])
    results["newer schema: report"] = "written by a newer lab" in (newer / "report.html").read_text()
    results["newer schema: compare"] = "newer" in compared and "older records" not in compared
    record_figure("issue 45 item 9: compare's keys, control characters in a handed-over folder, a newer schema",
                  len(results), sum(results.values()), f"20,000 keys compared in {took:.1f} s")
    assert all(results.values()), results
