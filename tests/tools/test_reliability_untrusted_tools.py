"""The tools tier of tests/unit/test_reliability_untrusted.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, record_figure

from lab.core import evidence
from shared_reliability_untrusted import LOGS, _cli


ERROR_LINE = "0.00.014.824 E gguf_init_from_reader: failed to read magic\n"


def _doctor(*args: str, stdin: bytes | None = None) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lab", "doctor", *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=300)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), time.monotonic() - t0


def _big_log(path: Path, megabytes: int = 50) -> Path:
    """A long clean log (real lines from tests/troubleshoot_logs/clean, shuffled) with one error at the end."""
    lines = [l for f in sorted((LOGS / "clean").glob("*.txt")) for l in f.read_text().splitlines(keepends=True)]
    rng = random.Random(7)
    with open(path, "w") as fh:
        written = 0
        while written < megabytes * 1_000_000:
            chunk = "".join(rng.choices(lines, k=2000))
            fh.write(chunk)
            written += len(chunk)
        fh.write(ERROR_LINE)
    return path


@pytest.mark.tools
def test_doctor_on_odd_inputs(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "binary.log").write_bytes(random.Random(1).randbytes(200_000) + b"\0" + ERROR_LINE.encode())
    big = _big_log(tmp_path / "big.log")
    cases = {  # name: (args, stdin, expected exit, text that must appear)
        "empty log": (["--log", str(tmp_path / "empty.log")], None, 0, "empty: nothing to diagnose"),
        "50 MB log, error on the last line": (["--log", str(big)], None, 1, "big.log:"),
        "binary data": (["--log", str(tmp_path / "binary.log")], None, 1, "binary data"),
        "a folder as --log": (["--log", str(tmp_path)], None, 1, "is a folder"),
        "a device as --log": (["--log", "/dev/zero"], None, 1, "not a regular file"),
        "missing file": (["--log", str(tmp_path / "nope.log")], None, 1, "No such file"),
        "a file as --run": (["--run", str(big)], None, 1, "not a folder"),
        "missing run folder": (["--run", str(tmp_path / "nope")], None, 1, "no such folder"),
        "empty folder as --run": (["--run", str(tmp_path / "emptyrun")], None, 0, "No known problem"),
        "5 MB on stdin": ([], ERROR_LINE.encode() * 1 + big.read_bytes()[:5_000_000] + ERROR_LINE.encode(), 1, "stdin:"),
    }
    (tmp_path / "emptyrun").mkdir()
    handled, problems, big_s = 0, [], None
    for name, (args, stdin, want_rc, needle) in cases.items():
        rc, out, err, took = _doctor(*args, stdin=stdin)
        if name.startswith("50 MB"):
            big_s = took
        if rc == want_rc and needle in out + err and "Traceback" not in err and took < 120:
            handled += 1
        else:
            problems.append(f"{name}: rc {rc} (want {want_rc}) in {took:.1f} s: {(out + err)[-400:]}")
    scanned = next((l for l in err.splitlines() if "stdin" in l), "")
    record_figure("lab doctor on odd inputs", len(cases), handled)
    record_figure("lab doctor, 50 MB log scanned whole (error on its last line found)", 1, int(big_s is not None and big_s < 120),
                  f"{big_s:.1f} s for the whole command on this 2-core machine")
    assert handled == len(cases), "\n".join(problems)


def _run_folder(path: Path, bad_records: dict[str, bytes]) -> Path:
    (path / "records").mkdir(parents=True)
    evidence.write_record(path, "06_tune", {"title": "Good", "summary": {"points_ok": 42}, "checks": []})
    for name, content in bad_records.items():
        (path / "records" / f"{name}.json").write_bytes(content)
    (path / "manifest.json").write_text(json.dumps({"run_id": path.name, "profile": {"name": "t"}, "notebooks": [],
                                                    "status": "interrupted",
                                                    "interrupted": {"signal": "SIGINT", "utc": "2026-12-01T10:00:00Z",
                                                                    "notebook": "04_serve"}}))
    return path


BAD_RECORDS = {"02_truncated": b'{"schema_version": 1, "record": "02_trunc', "03_list": b"[1, 2, 3]",
               "04_binary": bytes(range(256)), "05_checks_not_a_list": b'{"record": "05", "checks": "all good"}',
               "06_empty": b"", "07_summary_a_list": b'{"summary": [1, 2]}',
               "08_checks_of_strings": b'{"record": "08", "checks": ["pass", 3]}'}


@pytest.mark.tools
def test_report_and_compare_flag_bad_records_and_render_the_rest(tmp_path):
    run = _run_folder(tmp_path / "run", BAD_RECORDS)
    handled, problems = 0, []
    rc, text = _cli(["report", str(run)])
    html = (run / "report.html").read_text() if (run / "report.html").exists() else ""
    for name in BAD_RECORDS:
        flagged = f"{name}: record not readable" in html or (name == "08_checks_of_strings" and
                                                               "2 of its checks entries are not objects" in html)
        handled += flagged
        if not flagged:
            problems.append(f"report: {name} not flagged")
    # an interrupted run is never reported complete (issue 45): the report is written, and `lab report` exits 1
    assert rc == 1 and "interrupted" in text and "Traceback" not in text, text
    assert "42" in html and "This run was cut: SIGINT" in html and "04_serve" in html
    rc, text = _cli(["compare", str(run), str(run)])
    assert rc == 0 and "Traceback" not in text and "42" in text and "problem" in text.lower(), text
    not_runs = {"missing folder": tmp_path / "nope", "empty folder": tmp_path / "empty", "a file": run / "manifest.json"}
    (tmp_path / "empty").mkdir()
    for what, path in not_runs.items():
        for verb in (["report", str(path)], ["compare", str(run), str(path)]):
            rc, text = _cli(verb)
            ok = rc == 1 and "Traceback" not in text and str(path) in text
            handled += ok
            if not ok:
                problems.append(f"{verb[0]} on {what}: rc {rc}: {text[:200]}")
    assert not (tmp_path / "empty" / "report.html").exists()
    tried = len(BAD_RECORDS) + 2 * len(not_runs)
    record_figure("report / compare on bad records and non-run folders", tried, handled)
    assert handled == tried, problems
