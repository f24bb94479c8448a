"""Status that does not overstate (issue 44): a busy machine makes a benchmark level "invalid: machine busy" with the
cause first, a warning, not a failed check; `lab tune` says when it ran past its budget and why; notebook 07 counts a
warned check as the report's top counts do (a warned check, not a "note"); nothing the lab prints is cut mid-word
(lab.core.display.clip, the one way to shorten text), and no `text[:N]` slice of user-facing text comes back."""
import re

import pytest
from conftest import ROOT

from lab.core import display
from lab.experiments import tune
from lab.measure import bench
from lab.pages import troubleshoot


def _level(valid: bool, reasons=()):
    return {"concurrency": 1, "successes": 3, "requests": 4, "duration_s": 40.0, "stream_decode_tok_s": 5.0,
            "validity": {"valid": valid, "reasons": list(reasons), "warnings": []}}


def test_a_level_that_failed_on_a_busy_machine_is_invalid_machine_busy_cause_first():
    busy = {"wall_s": 40.0, "cpus": 2, "machine_busy_s": 90.0, "client_s": 10.0, "server_s": 31.0, "others_s": 48.8,
            "others_cores": 1.22}
    why = "run at concurrency 1: no complete answer within its overall deadline of 60 s"
    found = {c.name: c for c in bench.bench_checks([_level(False, [why])], None, None, None, busy=busy)}
    level = found["run at concurrency 1 valid"]
    assert level.status == "warn" and level.observed == "invalid: machine busy (3/4 ok in 40.0 s)"
    assert level.fix.startswith("machine busy: 1.22 cores of other work during the 40 s sweep") and why in level.fix
    assert found["machine quiet during the sweep"].status == "warn"
    # on a quiet machine the same level is the server's failure
    quiet = {**busy, "others_cores": 0.02, "others_s": 0.8}
    assert {c.name: c for c in bench.bench_checks([_level(False, [why])], None, None, None, busy=quiet)}[
        "run at concurrency 1 valid"].status == "fail"
    assert bench.machine_busy(quiet) is None and bench.machine_busy(None) is None


def test_tune_says_it_ran_past_its_budget_and_why():
    over = {"budget_s": 20.0, "elapsed_s": 214.0, "points": [{"status": "ok"}], "skipped": [{}, {}]}
    [check] = tune.budget_checks(over)
    assert check.status == "warn" and check.observed == "214 s taken, 1 point(s) measured, 2 not run"
    assert "194 s past its 20 s budget" in check.fix and "always measured" in check.fix
    [kept] = tune.budget_checks({**over, "elapsed_s": 18.0})
    assert kept.status == "pass" and kept.fix == ""
    assert tune.budget_checks({**over, "skip_reason": "no server"}) == []


def test_notebook_07_counts_warned_checks_as_the_top_counts_do():
    findings = ([{"entry_id": f"check:x{i}", "title": f"Check 'x{i}' warn", "severity": "info"} for i in range(6)]
                + [{"entry_id": "port-in-use", "title": "Port in use", "severity": "error"}])
    assert troubleshoot.findings_in_words(findings) == "1 error, 6 warned checks"
    assert troubleshoot.findings_in_words([]) == "none"


@pytest.mark.parametrize("text, limit, cut", [
    ("run at concurrency 1: no complete answer within its overall deadline of 60 s", 60,
     "run at concurrency 1: no complete answer within its overall…"),
    ("short", 10, "short"),
    ("f16 KV, -fa on; vLLM would need the fork", 16, "f16 KV, -fa on…"),
    ("a" * 50, 20, "a" * 19 + "…"),  # one word longer than the room: cut inside it (no boundary)
])
def test_clip_cuts_at_a_word_with_an_ellipsis(text, limit, cut):
    assert display.clip(text, limit) == cut and len(display.clip(text, limit)) <= limit


def test_bytes_under_a_kib_keep_their_fraction():
    assert display.human_bytes(1.0625) == "1.0625 B" and display.human_bytes(0.5625) == "0.5625 B"
    assert display.human_bytes(2) == "2 B" and display.human_bytes(262144) == "256 KiB"


# A slice `[:N]` (N ≥ 10) in the lab's code, except of a list (`…][:N]`, `join(names[:N])`), of a name made for a file
# (`isalnum`), a hash's first 12 hex digits or a UTC time's minute: what is left is text a user reads, which
# display.clip shortens at a word.
SLICE = re.compile(r"\[:\s*\d{2,}\s*\]")
NOT_TEXT = re.compile(r"\]\[:\s*\d+\s*\]|isalnum|splitlines\(\)\[|\bfor \w+ in\b.*\]\[:|join\(\w+\[:|\[:12\]|_utc\b")


def test_no_user_facing_text_is_sliced_mid_word():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sorted((ROOT / "lab").rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if SLICE.search(line) and not NOT_TEXT.search(line) and "sha" not in line and "digest" not in line]
    assert found == []
