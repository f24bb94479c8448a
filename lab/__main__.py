""".venv/bin/python -m lab VERB ... — the lab's command line.

Exit status: lab.core.exit_codes, one table for every verb (README "Exit codes"): 0 all good, 1 a problem was found
(an invalid or unknown profile, a path that does not exist or is not a run folder, log or wheel, a failed notebook,
plan errors, doctor findings), 2 bad usage (the command line itself), 130 / 143 / 129 a run cut by SIGINT / SIGTERM /
SIGHUP (the terminal closed). `run` adds 3: every notebook ran but a check failed (`--allow-failed-checks` makes
that 0); `run --profile all` (a batch): 0 all good, 3 a profile's checks failed, 10 + N when N profiles failed.
A bad file or path never prints a traceback (LAB_DEBUG=1 shows one).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from lab.core import exit_codes, interrupt

if __name__ == "__main__":
    interrupt.install()  # before anything slow is imported: see lab/core/interrupt.py


def _check_counts(run_dir) -> str:
    """'12 pass, 1 warn, 2 fail, 20 skip' over every record's checks (lab.records.manifest.check_counts)."""
    from lab.records import manifest

    return manifest.counts_text(manifest.check_counts(run_dir))


def _cmd_run(args) -> int:
    from lab.core import profiles
    from lab.records import batch_run, runner

    only = [o.strip().zfill(2) for o in args.only.split(",")] if args.only else None
    batch = batch_run.batch_profiles(args.profile)
    if batch is not None:
        return _run_batch(args, batch, only)
    try:
        result = runner.run(args.profile, only=only, out=args.out, synth_if_missing=args.synth_if_missing,
                            plan_only=args.plan_only, allow_failed_checks=args.allow_failed_checks)
    except profiles.ProfileError as exc:  # an invalid profile is a found problem (README: exit 1)
        print(f"invalid {exc}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, NotADirectoryError) as exc:  # --only / --out: bad usage
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.interrupted:
        return result.exit_code
    from lab.records import manifest

    for change in manifest.read(result.run_dir).get("model_changed") or []:
        print(f"note: model file changed since run {change['previous_run']}: {change['path']} "
              f"(sha256 {change['previous_sha256'][:12]}… → {change['sha256'][:12]}…)", file=sys.stderr)
    print(f"run folder: {result.run_dir}")
    print(f"report:     {result.run_dir / 'report.html'}")
    print(f"checks:     {_check_counts(result.run_dir)}")
    mode = manifest.read(result.run_dir).get("plan_reason")
    if mode:
        print(f"mode:       plan ({mode})")
    if not result.ok:
        failed = [r.notebook for r in result.results if r.status != "ok"]
        print(f"not ok: {', '.join(failed)} (see the report)", file=sys.stderr)
    elif result.failed_checks:
        print(f"{result.failed_checks} check(s) failed" + (" (allowed: --allow-failed-checks)" if
              result.allow_failed_checks else f": exit {runner.EXIT_CHECKS_FAILED}; --allow-failed-checks for an "
                                              "evaluation run on another machine"), file=sys.stderr)
    return result.exit_code


def _run_batch(args, names: list[str], only: list[str] | None) -> int:
    """`lab run --profile all` (or a,b,...): one run folder per profile, then the fleet table (`lab compare` of the
    runs); exit status = how many profiles failed (invalid or a notebook not ok), or the signal's for a cut batch."""
    from lab.records import batch_run, report

    try:
        batch = batch_run.run_batch(names, only=only, out=args.out, synth_if_missing=args.synth_if_missing,
                                    plan_only=args.plan_only, allow_failed_checks=args.allow_failed_checks)
    except (ValueError, FileNotFoundError, NotADirectoryError) as exc:  # --only / --out: bad usage
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if batch.interrupted is not None:
        return batch.exit_code
    for name, res in batch.runs.items():
        state = "not ok" if not res.ok else "checks" if res.checks_failed else "ok    "
        print(f"{state}  {name}: {res.run_dir} (checks: {_check_counts(res.run_dir)})")
    for name, why in batch.invalid.items():
        print(f"invalid {name}: {why.splitlines()[0]}")
    if batch.runs:
        _print_rows(report.compare_rows([res.run_dir for res in batch.runs.values()]))
    print(f"profiles: {len(names)}, ok {len(names) - len(batch.failed)}, failed {len(batch.failed)}"
          + (f" ({', '.join(batch.failed)})" if batch.failed else "")
          + (f"; checks failed in {len(batch.checks_failed)} ({', '.join(batch.checks_failed)})"
             if batch.checks_failed else "") + f"; exit {batch.exit_code}")
    return batch.exit_code


def _print_rows(rows: list[dict]) -> None:
    """A table within 100 columns: values as the report shows them, wide columns wrapped (lab.core.cli). A
    (record, result) row of `compare` reads its values in the result's unit (a *_bytes result in GiB) and names
    its record once."""
    from lab.core import cli, display

    shown, last = [], None
    for row in rows:
        if "result" in row:
            key = str(row["result"])
            row = {"record": "" if row.get("record") == last else row.get("record"), "result": display.label(key),
                   **{k: display.fmt(v, key) for k, v in row.items() if k not in ("record", "result")}}
            last = row["record"] or last
        shown.append(row)
    # many runs side by side (a fleet of 10 profiles) would squeeze each column to a few characters: print them
    # a few runs at a time, each table with the record and result columns again
    fixed = [k for k in ("record", "result") if any(k in r for r in shown)]
    runs = list(dict.fromkeys(k for r in shown for k in r if k not in fixed))
    per_table = max(1, (cli.WIDTH - 34) // 26)
    for n in range(0, max(len(runs), 1), per_table):
        part = runs[n:n + per_table]
        print(("\n" if n else "") + cli.text_table([{k: r.get(k, "") for k in fixed + part} for r in shown]))


def _machine_notes(prof) -> list[str]:
    """What is valid but will not work on this machine as written: a missing model file or engine
    (profiles.findings), a port something else already listens on."""
    from lab.core import profiles

    notes = profiles.findings(prof)
    if prof.engine != "external" and not getattr(prof, "endpoint_url", None):
        from lab.serving import serve

        try:
            serve.check_port_free(prof.host if prof.host in ("127.0.0.1", "localhost", "::1") else "127.0.0.1", prof.port)
        except serve.PortInUse as exc:
            notes.append(str(exc))
        except OSError:
            pass  # a host this machine has not: the profile is for another box
    return notes


def _cmd_validate(args) -> int:
    from lab.core import profiles

    bad = 0
    for item in args.paths:
        try:
            prof = profiles.load(item)
            print(f"ok      {item} ({prof.name})")
            for note in _machine_notes(prof):
                from lab.core import cli

                print(cli.fit(f"  note: {note}"))
        except profiles.ProfileError as exc:
            bad += 1
            print(f"invalid {exc}", file=sys.stderr)
    return 1 if bad else 0


def _cmd_plan(args) -> int:
    from lab.core import profiles
    from lab.predict import plan

    try:
        prof = profiles.load(args.profile)
    except profiles.ProfileError as exc:
        print(f"invalid {exc}", file=sys.stderr)
        return 1
    result = plan.plan(prof)
    # plan() is pure (no files); what differs on this machine (a missing model file) is added here
    result["on_this_machine"] = _machine_notes(prof)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False))
    else:
        from lab.core import cli

        print(cli.fit(plan.describe(result)))  # the notes about this machine are in it, counted
    return 1 if any(f["severity"] == "error" for f in result["findings"]) else 0


def _cmd_report(args) -> int:
    from lab import pages
    from lab.core import cli, run_folder
    from lab.records import report

    try:  # pages.closing_text: the closing text of a record written before records kept it
        print(report.build(args.run_dir, require_run=True, closing=pages.closing_text))
    except report.NotARun as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    cut = run_folder.not_complete(args.run_dir)
    if cut:  # the report is written, and says so; a run that never finished (a signal, a kill) is not "all good"
        print(cli.printable(f"error: {args.run_dir}: {cut}"), file=sys.stderr)
    return exit_codes.PROBLEM if cut else 0


def _cmd_compare(args) -> int:
    from lab.records import report
    try:
        rows = report.compare_rows(args.run_dirs)
    except report.NotARun as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.html:
        print(report.build_compare(args.run_dirs, args.html))
    else:  # what differs between the runs; --all: every result
        _print_rows(rows if args.all or len(args.run_dirs) < 2 else report.differing(rows))
    return 0


def _cmd_doctor(args) -> int:
    import time

    from lab.core import run_folder
    from lab.diagnose import doctor, troubleshoot

    if not args.log and not args.run and sys.stdin.isatty():
        print("error: give --log FILE, --run DIR, or pipe a log into `.venv/bin/python -m lab doctor`", file=sys.stderr)
        return 2
    findings, run_state = [], None
    for log in args.log or []:
        problem = doctor.log_problem(Path(log))
        if problem:  # a path that names no log is a found problem, as a missing run folder is (exit_codes)
            print(f"error: {problem}", file=sys.stderr)
            return exit_codes.PROBLEM
    if args.run:
        run = Path(args.run)
        if not run.is_dir():
            print(f"error: {run}: {'no such folder' if not run.exists() else 'not a folder'}; "
                  "--run takes a run folder (outputs/<profile>/<UTC>_<sha>/)", file=sys.stderr)
            return exit_codes.PROBLEM
        findings += troubleshoot.diagnose(run)
        run_state = run_folder.not_complete(run)  # a cut run is never "No known problem found"
    sources = [(Path(p), Path(p).name) for p in args.log or []]
    if not args.log and not args.run:
        sources.append((sys.stdin.buffer, "stdin"))
    for src, origin in sources:
        stats: dict = {}
        t0 = time.monotonic()
        findings += troubleshoot.diagnose_log(src, origin, stats)
        took = time.monotonic() - t0
        what = "empty: nothing to diagnose" if stats["bytes"] == 0 else \
            f"{stats['bytes'] / 1e6:.1f} MB, {stats['lines']:,} lines, all scanned in {took:.1f} s"
        binary = "; binary data (NUL bytes), read as text" if stats["binary"] else ""
        print(f"[doctor] {origin}: {what}{binary}", file=sys.stderr)
    findings = troubleshoot.rank(findings)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2, ensure_ascii=False))
        if run_state:
            print(f"error: {args.run}: not a complete run: {run_state}", file=sys.stderr)
    else:
        print(doctor.format_findings(findings, run_state))
    return exit_codes.PROBLEM if run_state else doctor.doctor_exit_code(findings, "info" if args.strict else "warn")


def _cmd_byhand(args) -> int:
    import shlex

    from lab.core import profiles
    from lab.core.paths import ROOT
    from lab.serving import byhand

    try:
        prof = profiles.load(args.profile)
        print(byhand.script(prof, args.ubuntu, lab_dir=shlex.quote(str(ROOT))))  # this clone: where models/ goes
    except profiles.ProfileError as exc:  # an invalid or unknown profile is a found problem, as in run and plan
        print(f"error: {exc}", file=sys.stderr)
        return exit_codes.PROBLEM
    except ValueError as exc:  # a profile the by-hand track does not cover (no GPU, another engine)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_wheel_arch(args) -> int:
    from lab.measure import wheel_arch

    for path in args.wheels:
        try:
            print(wheel_arch.report(path))
        except wheel_arch.WheelArchError as exc:  # a file that is not a wheel: a found problem
            print(f"error: {exc}", file=sys.stderr)
            return exit_codes.PROBLEM
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=".venv/bin/python -m lab")  # its description lists the verbs (_describe_verbs)
    sub = ap.add_subparsers(dest="verb", required=True, metavar="VERB")  # the list is below, 100 columns

    p = sub.add_parser("run", help="run the notebooks with papermill into outputs/<profile>/<UTC>_<sha>/")
    p.add_argument("--profile", default="cpu-default",
                   help="profile name in params/ or a path to a YAML (default cpu-default); `all`: every params/*.yaml, "
                        "or a,b,c: those, one run folder each, then the fleet table; a profile whose GPUs are not "
                        "here runs in plan mode")
    p.add_argument("--plan-only", action="store_true",
                   help="plan mode: measure nothing, start no server; every notebook predicts from the profile and "
                        "lab/data and says what it did not run (records say mode: plan)")
    p.add_argument("--allow-failed-checks", action="store_true",
                   help="exit 0 when every notebook ran even if checks failed (a buyer's evaluation run); without "
                        "it failed checks exit 3")
    p.add_argument("--only", default=None, help="comma-separated notebook numbers, e.g. 01,02")
    p.add_argument("--out", default=None, help="parent folder for the run folder (default outputs/<profile>/)")
    p.add_argument("--synth-if-missing", action="store_true",
                   help="when the profile's model file is missing and it names model_synth, run on a random-weight "
                        "GGUF of that shape (lab synth), labelled as a stand-in everywhere (speed/memory only)")
    p.set_defaults(fn=_cmd_run)

    p = sub.add_parser("validate", help="check profile files; exit 1 if any is invalid")
    p.add_argument("paths", nargs="+", help="params/*.yaml files or profile names")
    p.set_defaults(fn=_cmd_validate)

    p = sub.add_parser("plan", help="what should happen on this profile's hardware (no hardware needed)")
    p.add_argument("profile", help="profile name or path")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(fn=_cmd_plan)

    p = sub.add_parser("report", help="(re)build report.html of a run folder from its records")
    p.add_argument("run_dir")
    p.set_defaults(fn=_cmd_report)
    p = sub.add_parser("doctor", help="recognise known problems in logs or a run folder; exit 1 if any")
    p.add_argument("--log", action="append", help="a log file (repeatable); or pipe a log on stdin")
    p.add_argument("--run", help="a run folder: its logs, failed checks and notebook errors")
    p.add_argument("--json", action="store_true", help="print findings as JSON")
    p.add_argument("--strict", action="store_true", help="count informational notes as problems too")
    p.set_defaults(fn=_cmd_doctor)

    sub.add_parser("synth", add_help=False, help="write a random-weight GGUF of a real model's shape (speed/memory "
                                                "tests only); see `.venv/bin/python -m lab synth --help`")
    sub.add_parser("multigpu", add_help=False,
                   help="one GPU against two: llama.cpp split modes, scaling ratios, KV split, TP cost model; "
                        "see `.venv/bin/python -m lab multigpu --help`")
    sub.add_parser("cache", add_help=False, help="the lab's cache: sizes, entries no longer used, --prune removes them; "
                                               "see `.venv/bin/python -m lab cache --help`")
    sub.add_parser("tune", add_help=False, help="measure llama-server settings one at a time within a time budget, "
                                              "suggest a profile patch; see `.venv/bin/python -m lab tune --help`")
    sub.add_parser("predict", add_help=False, help="what will my card do: decode tok/s of Qwen3.8-27B on a card named "
                                                 "as people write it (or a TSV of set-ups), by lab plan's speed model, "
                                                 "or why not; see `.venv/bin/python -m lab predict --help`")
    sub.add_parser("share", add_help=False, help="a measured run folder as one public row (TSV and JSON) to publish or "
                                               "to give back to `lab predict --rows-dataset`; see `.venv/bin/python -m "
                                               "lab share --help`")

    p = sub.add_parser("byhand", help="the exact commands from a bare Ubuntu box to a served model and `make run` on "
                                      "the card (driver, Secure Boot, CUDA, build, model, lab run, llama-bench, "
                                      "server, curl, SSH tunnel)")
    p.add_argument("profile", help="a GPU profile name or path, e.g. v100-32g-x1")
    p.add_argument("--ubuntu", choices=["22.04", "24.04"], default="22.04", help="Ubuntu release (default 22.04)")
    p.set_defaults(fn=_cmd_byhand)

    p = sub.add_parser("wheel-arch", help="the CUDA architectures (sm_XX cubins, PTX) the .so files of a wheel carry, "
                                          "read from their .nv_fatbin sections (no install, no GPU)")
    p.add_argument("wheels", nargs="+", help="wheel files (pip download --no-deps --only-binary=:all: ...)")
    p.set_defaults(fn=_cmd_wheel_arch)

    p = sub.add_parser("compare", help="key results of several run folders side by side")
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--html", default=None, help="write an HTML table to this file instead of printing")
    p.add_argument("--all", action="store_true", help="every result, not only those that differ between the runs")
    p.set_defaults(fn=_cmd_compare)
    _describe_verbs(ap, sub)
    return ap


# Each verb's --help: what it does, in a paragraph, and examples to copy (the verbs of OWN_PARSERS have their own
# parsers, with theirs). `lab --help` lists every registered verb.
VERB_HELP = {
    "run": ("Run the notebooks (papermill) on a profile into outputs/<profile>/<UTC>_<sha>/: the executed notebooks, "
            "records/*.json and report.html. Prints the run folder, the report's path and the checks' counts.",
            [".venv/bin/python -m lab run", ".venv/bin/python -m lab run --profile v100-32g-x1",
             ".venv/bin/python -m lab run --profile cpu-default --only 01,02", ".venv/bin/python -m lab run --profile all"]),
    "validate": ("Check profile files field by field (exit 1 naming the file and the field when one is invalid); "
                 "a note for what is valid but will not work on this machine (a missing model file, a busy port).",
                 [".venv/bin/python -m lab validate cpu-default", ".venv/bin/python -m lab validate params/*.yaml"]),
    "plan": ("What should happen on the profile's hardware, without it: the compatibility rules, the memory plan "
             "(fits or not, and how much is spare), the decode ceiling and the predicted speed, the routes, the "
             "seeds' claims judged. Exit 1 when the plan has an error.",
             [".venv/bin/python -m lab plan v100-32g-x1", ".venv/bin/python -m lab plan params/rtx4090-24g.yaml --json"]),
    "report": ("(Re)build report.html of a run folder from its records and its profile; nothing runs again, so a "
               "shared run folder gets the report of this checkout.",
               [".venv/bin/python -m lab report outputs/cpu-default/20261202T000704Z_06ed2fbb"]),
    "doctor": ("Recognise known problems in logs, a run folder or stdin: each finding with what was seen, its cause, "
               "the fix, the commands and the source. Exit 1 when a warning or an error matched (--strict: a note "
               "too).", [".venv/bin/python -m lab doctor --log server.log", ".venv/bin/python -m lab doctor --run outputs/v100-32g-x1/<run>",
                          "journalctl -k | .venv/bin/python -m lab doctor"]),
    "byhand": ("The exact commands to set a GPU profile up by hand on Ubuntu: check the card, the driver, the CUDA "
               "toolkit, the llama.cpp build, the model with its sha256, the server, a curl test, the offload check.",
               [".venv/bin/python -m lab byhand v100-32g-x1", ".venv/bin/python -m lab byhand v100-32g-x2-nvlink --ubuntu 24.04 > byhand.sh"]),
    "wheel-arch": ("The CUDA architectures (sm_XX cubins, PTX) the .so files of a wheel carry, read from their "
                   ".nv_fatbin sections: whether a wheel runs on a V100 (sm_70), without installing it or a GPU.",
                   ["pip download --no-deps --only-binary=:all: -d wheels vllm==0.10.1.1",
                    ".venv/bin/python -m lab wheel-arch wheels/*.whl"]),
    "compare": ("Key results of several run folders side by side (each record's summary), 100 columns wide: the "
                "results that differ between the runs (--all: every result); --html writes every result as a page.",
                [".venv/bin/python -m lab compare outputs/cpu-default/A outputs/cpu-default/B",
                 ".venv/bin/python -m lab compare outputs/*/* --html compare.html"]),
}


def _describe_verbs(ap: argparse.ArgumentParser, sub) -> None:
    from lab.core import cli

    for name, p in sub.choices.items():
        p.formatter_class = cli.HelpFormatter
        if name in VERB_HELP:
            p.description, examples = VERB_HELP[name][0], VERB_HELP[name][1]
            p.epilog = cli.examples(*examples)
        if name == "doctor":  # the knowledge base is read only when its help is asked for (0.25 s)
            p.format_help = _with_known_problems(p, p.format_help)
    ap.formatter_class = cli.HelpFormatter
    ap.description = ("Budget-GPU LLM lab. Verbs: " + ", ".join(sub.choices) + ". `.venv/bin/python -m lab VERB --help` "
                      "says what each does, with examples.")
    ap.epilog = cli.examples(".venv/bin/python -m lab run", ".venv/bin/python -m lab plan v100-32g-x1", ".venv/bin/python -m lab byhand v100-32g-x1",
                             ".venv/bin/python -m lab doctor --log server.log")


def _with_known_problems(p: argparse.ArgumentParser, format_help):
    def help_text() -> str:
        p.description = VERB_HELP["doctor"][0] + " It recognises: " + ", ".join(_known_problems()) + "."
        return format_help()
    return help_text


def _known_problems() -> list[str]:
    """The ids of the problems `lab doctor` recognises (lab/data/troubleshooting.yaml)."""
    from lab.diagnose import knowledge_base

    try:
        return [e.id for e in knowledge_base.load_kb()]
    except Exception as exc:  # the help must print even with a broken knowledge base
        return [f"(lab/data/troubleshooting.yaml could not be read: {exc})"]


def _one_line(exc: BaseException) -> str:
    from lab.core import display

    return display.clip(" ".join(str(exc).split()), 300)


# Verbs whose module owns its options, with its own main(argv) (argparse cannot forward "--x" through a subparser);
# each is registered in build_parser with add_help=False so `lab --help` lists it. Imported only when it is the verb.
OWN_PARSERS = {"synth": "lab.model.synth", "multigpu": "lab.experiments.multigpu", "cache": "lab.diagnose.cache",
               "tune": "lab.experiments.tune", "predict": "lab.predict.predict_cli", "share": "lab.records.share"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in OWN_PARSERS:
        import importlib

        return importlib.import_module(OWN_PARSERS[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.fn(args)


def entry(argv: list[str] | None = None) -> int:
    """main() with the user-facing rules: one line instead of a traceback (LAB_DEBUG=1 shows it), 130 on
    Ctrl-C, 0 on a closed pipe."""
    import os

    old_handlers = interrupt.install()  # SIGTERM and SIGHUP unwind like Ctrl-C: one line
    try:
        return main(argv)
    except BrokenPipeError:  # `.venv/bin/python -m lab plan x | head` closed the pipe early: not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt as exc:
        name = interrupt.name_of(exc)
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(f"interrupted ({name})", file=sys.stderr)
        return interrupt.SIGNAL_EXIT[name]
    except (OSError, UnicodeError, ValueError) as exc:  # a bad path or file the user gave
        if os.environ.get("LAB_DEBUG") == "1":
            raise
        print(f"error: {type(exc).__name__}: {_one_line(exc)} (LAB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    finally:
        interrupt.restore_handlers(old_handlers)


def console() -> int:
    """The command line, as `.venv/bin/python -m lab` and the `lab` script run it: entry(), then no signal handling left."""
    code = entry()
    # The verb is done and has said so: a Ctrl-C, SIGTERM or SIGHUP during the interpreter's teardown (papermill's
    # and zmq's clean-up take a moment on a busy machine) must not turn its exit status into "killed by a signal".
    interrupt.ignore_cuts()
    return code


if __name__ == "__main__":
    sys.exit(console())
