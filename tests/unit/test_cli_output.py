"""What the verbs print fits a 100-column terminal: `lab plan` for every profile, `lab compare` of two run folders,
every verb's --help (each with a description and examples), and `lab --help` names every registered verb.
In-process (lab.__main__.main), so a unit test."""
import argparse
import re
import shutil

import pytest

from lab import __main__ as cli_main
from lab.core import cli
from lab.core.paths import ROOT
from lab.records import report

PROFILES = sorted(p.stem for p in (ROOT / "params").glob("*.yaml"))
H200_RUN = ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936"


def run(argv, capsys) -> tuple[int, str]:
    try:
        rc = cli_main.main(argv)
    except SystemExit as exc:  # --help
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out + out.err


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > cli.WIDTH]


def verbs() -> list[str]:
    sub = next(a for a in cli_main.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


@pytest.mark.parametrize("name", PROFILES)
def test_plan_fits_100_columns_and_counts_every_note_it_prints(name, capsys):
    rc, text = run(["plan", name], capsys)
    assert rc in (0, 1) and text.strip() and too_wide(text) == []
    head = re.match(r"profile \S+: (\d+) error\(s\), (\d+) warning\(s\), (\d+) note\(s\)", text)
    assert head, text[:200]
    shown = len(re.findall(r"^  \[info\] ", text, re.M)) + len(re.findall(r"^  \[on this machine\] ", text, re.M))
    assert int(head.group(3)) == shown, "a note printed under '0 note(s)'"
    # one unit per quantity: sizes in GiB, never GB (GB only for bandwidth and the bytes a token reads)
    memory = re.search(r"^  memory: .*?(?=^  \S)", text, re.M | re.S)
    assert "sizes in GiB" in text and memory and " GB " not in memory.group(0) and "GB/card" not in text
    line = " ".join(memory.group(0).split())
    if "fits" in line and "does NOT fit" not in line:
        assert "GiB spare per device" in line
    # the line adds up (issue 37: 15.40 + 8.00 + 0.58 + 1.23 was printed beside "7.45 GiB spare" of 32)
    parts = re.search(r"memory: weights ([\d.]+) GiB.*? \+ (?:KV and state|KV) ([\d.]+) GiB.*?"
                      r"(?:\+ recurrent state ([\d.]+) GiB.*?)?\+ overhead ([\d.]+) GiB = ([\d.]+) of ([\d.]+) GiB", line)
    if parts:  # a plan with a memory budget (not an endpoint's)
        w, kv, st, oh, used, budget = (float(x or 0) for x in parts.groups())
        assert abs(w + kv + st + oh - used) <= 0.02, line
        spare = re.search(r"([\d.]+) GiB spare per device", line)
        if spare:
            assert abs(budget - used - float(spare.group(1))) <= 0.011, line


def test_compare_of_two_run_folders_fits_100_columns_without_raw_dicts(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(H200_RUN / "records", a / "records")
    shutil.copytree(H200_RUN / "records", b / "records")
    shutil.copy(H200_RUN / "manifest.json", a / "manifest.json")
    rc, text = run(["compare", str(a), str(b), "--all"], capsys)
    assert rc == 0 and too_wide(text) == [] and "{'" not in text and "': " not in text
    assert re.search(r"Model file\s+14\.3 GiB\s+14\.3 GiB", text), "a *_bytes result reads in GiB"
    # by default only what differs (issue 37: two runs took 396 lines): two copies of one run differ in nothing
    rc, short = run(["compare", str(a), str(b)], capsys)
    assert rc == 0 and "Model file" not in short and "more results are the same in every run (--all" in " ".join(short.split())
    assert len(short.splitlines()) < 15 < len(text.splitlines()), short
    rows = [{"record": "run", "result": "status", "a": "ok", "b": "ok"},
            {"record": "06_benchmark", "result": "peak_vram_mib_sweep", "a": 33959.875, "b": 33960.1},  # same MiB
            {"record": "06_benchmark", "result": "best_aggregate_tok_s", "a": 245.2, "b": 157.3}]
    assert report.differing(rows) == [rows[0], rows[2], {"record": "", "result": "1 more result is the same in "
                                                                                   "every run (--all shows them)"}]


@pytest.mark.parametrize("verb", verbs())
def test_every_verb_has_a_description_and_examples_within_100_columns(verb, capsys):
    rc, text = run([verb, "--help"], capsys)
    assert rc == 0 and too_wide(text) == []
    assert "\nexamples:\n  python -m lab " in text or "\nexamples:\n" in text and f"lab {verb}" in text
    description = text.split("\n\n")[1]
    assert not description.startswith(("options:", "positional")) and len(description) > 40, text[:300]


def test_lab_help_names_every_registered_verb(capsys):
    rc, text = run(["--help"], capsys)
    described = text.split("\n\n")[1]
    assert rc == 0 and too_wide(text) == []
    assert [v for v in verbs() if v not in described] == [], described
    assert {"multigpu", "cache", "tune"} <= set(verbs())


def test_doctor_help_lists_what_it_recognises(capsys):
    from lab.diagnose import knowledge_base

    _, text = run(["doctor", "--help"], capsys)
    flat = " ".join(text.split())
    assert [e.id for e in knowledge_base.load_kb() if e.id not in flat] == []


def test_fit_and_text_table_wrap_instead_of_cutting():
    long = "  claim x: " + "word " * 60
    fitted = cli.fit(long)
    assert too_wide(fitted) == [] and " ".join(fitted.split()) == " ".join(long.split())
    assert all(line.startswith("      ") for line in fitted.splitlines()[1:])  # under its own indentation, +4
    table = cli.text_table([{"result": "checks", "a": {"pass": 4, "fail": 1}, "b": "x " * 80}])
    assert too_wide(table) == [] and "Pass: 4; Fail: 1" in table and "{'" not in table
