"""One exit-code table for every verb (lab.core.exit_codes), the README's list equal to it, and the verbs answering
with it: a path that names nothing is a found problem (1) in every verb, a wrong command line is bad usage (2).
Issue 37 found `lab compare /missing` 1 beside `lab doctor --log /missing` 2."""
import re

import pytest
from conftest import ROOT, cli_output

from lab.core import exit_codes, interrupt
from lab.records import runner


def test_readme_lists_the_table():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for code, meaning in exit_codes.MEANINGS.items():
        if code in exit_codes.SIGNALS.values():
            continue
        assert f"| {code} | {meaning} |" in readme, code
    assert "| 130 / 143 / 129 / 131 | cut by Ctrl-C / cut by SIGTERM / cut by SIGHUP / cut by SIGQUIT |" in readme


def test_one_table_under_the_runner_and_the_signals():
    assert (runner.EXIT_OK, runner.EXIT_NOTEBOOKS_FAILED, runner.EXIT_USAGE, runner.EXIT_CHECKS_FAILED) == (0, 1, 2, 3)
    assert interrupt.SIGNAL_EXIT is exit_codes.SIGNALS
    assert exit_codes.describe(13).startswith("lab run --profile all: 3 profile(s) failed")
    assert "not one of the lab's exit codes" in exit_codes.describe(139)


@pytest.mark.parametrize("argv, code", [
    (["compare", "/missing-a", "/missing-b"], 1), (["report", "/missing"], 1), (["doctor", "--log", "/missing"], 1),
    (["doctor", "--run", "/missing"], 1), (["validate", "/missing.yaml"], 1), (["plan", "/missing.yaml"], 1),
    (["byhand", "no-such-profile"], 1), (["doctor", "--no-such-flag"], 2), (["no-such-verb"], 2),
])
def test_every_verb_answers_with_the_table(argv, code):
    rc, text = cli_output(argv)
    assert rc == code, (argv, text[-300:])
    assert "Traceback" not in text


def test_make_prints_the_code_and_its_meaning(capsys):
    assert exit_codes.main(["3", "lab run --profile v100-32g-x1"]) == 3
    said = capsys.readouterr().err
    assert re.match(r"\[make\] lab run --profile v100-32g-x1 exited 3: lab run: every notebook ran but a check failed", said)
    makefile = (ROOT / "Makefile").read_text()
    assert "|| $(PY) -m lab.core.exit_codes $$?" in makefile
