"""The lab's exit codes: one table for every verb (`.venv/bin/python -m lab …`) and for `make run` / `make test`, so a script
(or a person reading `echo $?`) tells a found problem from a typo from a cut run. README "Exit codes" shows this table
(tests/unit/test_exit_codes.py keeps them equal).

make itself exits 2 whenever a recipe fails, whatever the recipe's own code (GNU make manual, "Exit Status of
make": 0, 1 with -q, 2 on errors): the Makefile prints the lab's code and its meaning (`python -m lab.core.exit_codes
N`) before make turns it into 2, and `.venv/bin/python -m lab run …` returns it as is.
"""
from __future__ import annotations

import sys

OK = 0
PROBLEM = 1  # the lab found a problem: in what you gave it (profile, path) or in what it ran or measured
USAGE = 2  # the command line itself is wrong
CHECKS_FAILED = 3  # lab run: every notebook ran, some check failed
BATCH_FAILED_BASE = 10  # lab run --profile all: 10 + N profiles failed (11..110)
BATCH_FAILED_MAX = 100
SIGNALS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129, "SIGQUIT": 131}

MEANINGS = {
    OK: "all good",
    PROBLEM: ("a problem was found: an invalid or unknown profile, a path that does not exist or is not a run folder, "
              "log or wheel, a failed notebook, plan errors, doctor findings"),
    USAGE: ("bad usage: the command line itself is wrong (an unknown verb or flag, a flag value of the wrong form, "
            "--only naming no notebook, --out naming a file, doctor given nothing to read)"),
    CHECKS_FAILED: "lab run: every notebook ran but a check failed (--allow-failed-checks makes it 0)",
    SIGNALS["SIGINT"]: "cut by Ctrl-C",
    SIGNALS["SIGTERM"]: "cut by SIGTERM",
    SIGNALS["SIGHUP"]: "cut by SIGHUP",
    SIGNALS["SIGQUIT"]: "cut by SIGQUIT",
}


def describe(code: int) -> str:
    """What exit code `code` means, in one line."""
    if code in MEANINGS:
        return MEANINGS[code]
    if BATCH_FAILED_BASE < code <= BATCH_FAILED_BASE + BATCH_FAILED_MAX:
        return f"lab run --profile all: {code - BATCH_FAILED_BASE} profile(s) failed (invalid, or a notebook not ok)"
    return "not one of the lab's exit codes (a crash of Python or of a tool it ran?)"


def main(argv: list[str]) -> int:
    """`python -m lab.core.exit_codes CODE [WHAT]`: one line for make's recipes, then exit with CODE."""
    code = int(argv[0])
    what = " ".join(argv[1:]) or "the lab"
    print(f"[make] {what} exited {code}: {describe(code)} (make itself then exits 2; run the command shown above "
          "without make for this code)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
