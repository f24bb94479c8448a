"""`lab run`: papermill runs the notebooks in order into one run folder, then the manifest and report.

A failing notebook does not stop the others, except those that depend on it (they are skipped,
saying why). The run exits non-zero when anything failed; the report shows what and the error. A batch of
profiles (`lab run --profile all`): lab.records.batch_run.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.core import evidence, exit_codes, interrupt, processes, profiles, redaction
from lab.serving import engines
from lab.core.interrupt import SIGNAL_EXIT, CutWatch, name_of
from lab.core.paths import NOTEBOOKS
from lab.setup.jupyter import KERNEL_NAME

# Which notebooks need another one to have succeeded first (by two-digit prefix).
DEPENDS_ON: dict[str, tuple[str, ...]] = {"06": ("04",)}


# The per-run API key the lab's own servers get (lab.serving.serve reads it; see serve.run_api_key): made here so
# the runner can redact it from logs a cut run leaves behind, handed to kernels through the environment.
RUN_KEY_ENV = engines.RUN_KEY_ENV

@dataclass
class NotebookResult:
    notebook: str
    status: str  # ok | failed | skipped | interrupted | not run
    duration_s: float = 0.0
    error: str | None = None
    output: str | None = None


# `lab run`'s exit status (README "Exit codes"; lab/__main__.py): one meaning each, so a batch script can tell them
# apart. A batch (`--profile all`) exits EXIT_OK, EXIT_CHECKS_FAILED, or BATCH_FAILED_BASE + the number of profiles
# that failed (invalid, or a notebook not ok): 11..110, never read as a signal's 129/130/143.
# The numbers are lab.core.exit_codes' (one table for every verb).
EXIT_OK = exit_codes.OK  # every notebook ran and no check failed (plan mode: nothing not-run counts as a failure)
EXIT_NOTEBOOKS_FAILED = exit_codes.PROBLEM  # a notebook failed (or the profile is invalid)
EXIT_USAGE = exit_codes.USAGE  # bad flags, --only, --out
EXIT_CHECKS_FAILED = exit_codes.CHECKS_FAILED  # every notebook ran, some check failed (--allow-failed-checks: 0)
BATCH_FAILED_BASE = exit_codes.BATCH_FAILED_BASE
BATCH_FAILED_MAX = exit_codes.BATCH_FAILED_MAX


@dataclass
class SuiteResult:
    """What `lab run` did: its run folder and each notebook's result (lab.measure.loadgen.RunResult is a load run)."""
    run_dir: Path
    results: list[NotebookResult] = field(default_factory=list)
    interrupted: dict | None = None  # {"signal", "utc", "notebook"} when the run was cut
    errors: list[str] = field(default_factory=list)  # the run's own files that could not be written (a full disk)
    failed_checks: int = 0  # checks with status fail over the run's records
    allow_failed_checks: bool = False  # a buyer's evaluation run: failed checks are expected, exit 0

    @property
    def ok(self) -> bool:
        return self.interrupted is None and not self.errors and all(r.status == "ok" for r in self.results)

    @property
    def checks_failed(self) -> bool:
        return self.failed_checks > 0 and not self.allow_failed_checks

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return SIGNAL_EXIT.get(self.interrupted["signal"], 130)
        if not self.ok:
            return EXIT_NOTEBOOKS_FAILED
        return EXIT_CHECKS_FAILED if self.checks_failed else EXIT_OK


def discover(only: list[str] | None = None) -> list[Path]:
    """notebooks/NN_*.ipynb in order, optionally only the given prefixes ("01", "02")."""
    books = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if only:
        known = {b.name[:2] for b in books}
        unknown = [o for o in only if o not in known]
        if unknown:
            raise ValueError(f"--only {','.join(unknown)}: no such notebook; known: {', '.join(sorted(known))}")
        books = [b for b in books if b.name[:2] in only]
    return books


def strip_unstable_metadata(path: Path) -> None:
    """Drop per-cell timings and similar noise so two runs' notebooks diff on content only."""
    nb = json.loads(path.read_text())
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {})
        meta.pop("execution", None)
        pm = meta.get("papermill")
        if isinstance(pm, dict):
            for key in ("start_time", "end_time", "duration"):
                pm.pop(key, None)
    pm = nb.get("metadata", {}).get("papermill")
    if isinstance(pm, dict):
        for key in ("start_time", "end_time", "duration", "input_path", "output_path"):
            pm.pop(key, None)
    evidence.write_whole(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _error_text(exc: Exception) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    return f"{ename}: {evalue}"


REQUIRED_PARAMETERS = ("profile", "run_dir", "settings")


def parameter_problem(book: Path) -> str | None:
    """papermill only *warns* when a notebook lacks a parameter it is given; the lab refuses."""
    import papermill as pm

    found = set(pm.inspect_notebook(str(book)))
    missing = [p for p in REQUIRED_PARAMETERS if p not in found]
    if missing:
        return (f"{book.name}: the cell tagged 'parameters' does not define {', '.join(missing)} "
                f"(papermill parsed: {', '.join(sorted(found)) or 'nothing'}); write them as typed literals, "
                f'e.g. run_dir: str = ""  # comment')
    return None


def kernel_manager_class(log_path: Path, runtime: Path | None = None):
    """nbclient's kernel manager with the kernel's own stdout/stderr in `log_path`, not on the terminal: a
    kernel shut down mid-cell prints tracebacks there (zmq, asyncio), which a user of `lab run` should not
    have to read, and which belong with the run's other logs. Its connection file (the kernel's ports and
    HMAC key) goes into `runtime`, the run's private folder removed at the end: jupyter_client otherwise
    makes it with tempfile.mkstemp and only deletes it on a clean shutdown, so a cut run left it in /tmp."""
    from jupyter_client.manager import AsyncKernelManager

    class LoggedKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            if runtime is not None and not self.connection_file:
                self.connection_file = str(runtime / f"kernel-{os.getpid()}-{id(self):x}.json")

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with evidence.open_stream(log_path, append=True) as fh:  # Popen keeps its own copy of the descriptor
                kw["stdout"] = kw["stderr"] = fh
                return await super()._async_launch_kernel(kernel_cmd, **kw)

    return LoggedKernelManager


# What the notebook kernels inherit: a progress bar redrawn in a saved notebook is dozens of stale
# fragments, so tqdm stays off inside executed notebooks (TQDM_DISABLE, read by tqdm ≥ 4.66 at import;
# lab.progress reads it too). papermill's own bar in this process was created before, so the CLI keeps it.
KERNEL_ENV = {"TQDM_DISABLE": "1", "LAB_EXECUTED": "1"}


@contextlib.contextmanager
def kernel_environment():
    """KERNEL_ENV, and llama.cpp's thread-wait setting (lab.core.processes) for the bindings a kernel loads and the
    tools and servers it starts."""
    env = {**KERNEL_ENV, **processes.llama_cpp_env()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def look_at_report(run_dir: Path) -> None:
    """Open report.html in headless Chromium when it is installed and keep what it showed (report.png,
    report-check.json); a browser problem is reported, never a reason to fail the run."""
    from lab.records import browser

    try:
        seen = browser.check_run(run_dir)
    except Exception as exc:  # the report exists either way; say why it was not looked at
        print(f"[run] report not checked in Chromium: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return
    if seen is None:
        print("[run] report not checked in Chromium (not installed: apt-get install -y chromium)", file=sys.stderr)
    else:
        found = seen["findings"]
        for line in seen.get("startup") or []:  # a start-up crash tried again (lab.records.browser._start): said
            print(f"[run] Chromium crashed at start-up and was started again: {line}", file=sys.stderr, flush=True)
        print(f"[run] report checked in Chromium: {'reads right' if not found else '; '.join(found)} "
              f"(page {seen['page_height']} px high; screenshot report.png)", file=sys.stderr, flush=True)


def run_notebook(book: Path, run_dir: Path, profile_path: Path, runtime: Path | None = None,
                 settings: dict | None = None) -> NotebookResult:
    """Run one notebook into the run folder. The profile arrives once: `settings` (the profile this run validated,
    `notebook_settings`) travel as the notebook's `settings` parameter, so its kernel reads no file again."""
    import papermill as pm

    out = run_dir / "notebooks" / book.name
    t0 = time.monotonic()
    problem = parameter_problem(book)
    if problem:
        return NotebookResult(book.stem, "failed", 0.0, f"BadParameters: {problem}")
    try:
        with kernel_environment():
            pm.execute_notebook(str(book), str(out), parameters={"profile": str(profile_path), "run_dir": str(run_dir),
                                                            "settings": settings or {}},
                                kernel_name=KERNEL_NAME, progress_bar=True, cwd=str(NOTEBOOKS),
                                request_save_on_cell_execute=True,
                                kernel_manager_class=kernel_manager_class(run_dir / "logs" / f"kernel-{book.stem}.log",
                                                                                     runtime))
        status, error = "ok", None
    except Exception as exc:  # papermill raises PapermillExecutionError; kernel deaths raise others
        status, error = "failed", _error_text(exc)
    if out.exists():
        try:
            strip_unstable_metadata(out)
        except (OSError, ValueError) as exc:  # a full disk cut papermill's copy short (not JSON), or this write failed
            status, error = "failed", (f"{out.name}: the executed notebook could not be saved whole: "
                                       f"{type(exc).__name__}: {exc}" + (f"; the notebook's own error: {error}" if error else ""))
    return NotebookResult(book.stem, status, round(time.monotonic() - t0, 2), error,
                          str(out.relative_to(run_dir)) if out.exists() else None)


def stop_children(grace_s: float = 5.0) -> list[int]:
    """Stop every process this one started (kernels, the servers they started, their workers): SIGTERM,
    `grace_s` to exit, then SIGKILL. Returns the pids found."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    for proc in kids:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(kids, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=3)
    return [p.pid for p in kids]


def finish_partial_files(run_dir: Path, note: str, secrets: tuple[str, ...] = ()) -> list[str]:
    """What a cut run leaves half-written: owner-only raw server logs (`logs/.NAME.log.partial`) become
    redacted `logs/NAME.log` with a last line saying they were cut; half-written records are removed (a
    record is whole or absent). Returns what was done, for the manifest."""
    done = []
    for raw in sorted((run_dir / "logs").rglob(".*.log.partial")):
        final = raw.with_name(raw.name[1:].removesuffix(".partial"))
        try:
            if not final.exists():
                text = redaction.redact(raw.read_text(errors="replace"), *secrets)
                evidence.write_whole(final, text + f"\n[lab] {note}\n")
                done.append(f"{final.relative_to(run_dir)}: redacted from the raw log")
        except OSError as exc:  # a full disk: the raw log goes rather than stay unredacted
            done.append(f"{final.relative_to(run_dir)}: not written ({exc}); the raw log was removed")
        finally:
            raw.unlink(missing_ok=True)
    for partial in sorted((run_dir / "records").glob("*.partial")):
        partial.unlink(missing_ok=True)
        done.append(f"{partial.relative_to(run_dir)}: half-written record removed")
    return done


def say(line: str) -> None:
    """One `[run]` line on stderr; after SIGHUP the terminal may be gone, which must not stop the clean-up."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def run(profile: str, only: list[str] | None = None, out: str | None = None,
        synth_if_missing: bool = False, plan_only: bool = False, allow_failed_checks: bool = False) -> SuiteResult:
    """Run the notebooks into a fresh run folder, then write the manifest and the report.

    SIGINT (Ctrl-C), SIGTERM or SIGHUP at any point (start-up, a notebook, between notebooks, the manifest, the
    report, its Chromium check) cuts the run cleanly: every kernel and server it started is stopped, raw logs are
    redacted, the manifest and report say what was cut, when and during what, and `result.interrupted` is set
    (the CLI exits 130 / 143 / 129). From the first signal on, signals are ignored: the clean-up is bounded (the
    manifest then uses what the run already knows, never asking a server or hashing a model file).
    Tests cut runs at the named points of lab.core.interrupt.cut_point (LAB_TEST_CUT_AT).

    synth_if_missing: the user allows a synthetic random-weight stand-in when the profile's model file is
    missing and the profile names model_synth (lab/model/standin.py); the run then uses the labelled profile copy.

    plan_only: plan mode whatever this machine has (lab.core.planmode; the kernels inherit LAB_PLAN_ONLY=1). A profile
    whose GPUs are not here runs in plan mode anyway, and says so once, here. allow_failed_checks: failed checks do
    not make the exit status EXIT_CHECKS_FAILED (a buyer evaluating a card's profile on another box)."""
    import secrets

    from lab.core import planmode

    from lab.model import standin

    profile_path = profiles.resolve(profile).resolve()
    prof = profiles.load(profile_path)
    books = discover(only)
    started = evidence.utc_now()
    # Kernels write their connection files (which hold the kernel's HMAC key) into a private folder
    # removed at the end, whatever happens: none is left behind in ~/.local/share/jupyter/runtime.
    runtime = Path(tempfile.mkdtemp(prefix="lab-run-"))
    saved_env = {k: os.environ.get(k) for k in ("JUPYTER_RUNTIME_DIR", RUN_KEY_ENV, interrupt.CUT_PID_ENV,
                                                 planmode.PLAN_ENV)}
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
    if plan_only:  # this process (manifest, report) and the kernels it starts
        os.environ[planmode.PLAN_ENV] = "1"
    run_key = os.environ.setdefault(RUN_KEY_ENV, secrets.token_urlsafe(24))
    if os.environ.get(interrupt.CUT_AT_ENV):  # a test's cut point inside a kernel signals this process
        os.environ[interrupt.CUT_PID_ENV] = str(os.getpid())
    watch = CutWatch()
    result: SuiteResult | None = None
    where = {"notebook": None, "during": "start-up"}  # what a cut interrupts
    try:
        result = SuiteResult(evidence.new_run_dir(prof.name, out), allow_failed_checks=allow_failed_checks)
        run_dir = result.run_dir
        say(f"[run] profile {prof.name} → {run_dir}")
        if planmode.reason(prof):
            say(f"[run] {planmode.reason(prof)}: every notebook does what needs no such hardware and says what it "
                "did not run; its numbers are predictions")
        substituted = standin.for_run(prof, profile_path, run_dir, standin.allowed(synth_if_missing))
        if substituted is not None:
            profile_path, prof = substituted, profiles.load(substituted)
        for book in books:
            prefix = book.name[:2]
            failed_deps = [r.notebook for r in result.results
                           if r.notebook[:2] in DEPENDS_ON.get(prefix, ()) and r.status != "ok"]
            if failed_deps:
                res = NotebookResult(book.stem, "skipped", error=f"skipped: depends on {', '.join(failed_deps)}, which did not succeed")
            else:
                where.update(notebook=book.stem, during=f"notebook {book.stem}")
                say(f"[run] {book.stem} ...")
                interrupt.cut_point(f"notebook-start:{prefix}")
                res = run_notebook(book, run_dir, profile_path, runtime, profiles.settings(prof))
            result.results.append(res)
            where.update(notebook=None, during=f"the step after {book.stem}")
            say(f"[run] {book.stem}: {res.status} ({res.duration_s:.1f} s)" + (f" — {res.error}" if res.error else ""))
            interrupt.cut_point(f"notebook-end:{prefix}")
        # A kernel that died (killed, out of memory) leaves its server's raw log behind: redact it too.
        for done in finish_partial_files(run_dir, "log cut: the notebook's kernel ended before the server was stopped",
                                         (run_key,)):
            say(f"[run] {done}")
        where["during"] = "the manifest"
        interrupt.cut_point("manifest")
        write_manifest_and_report(result, prof, profile_path, started, where)
        where["during"] = "the report's check in Chromium"
        interrupt.cut_point("report-check")
        look_at_report(run_dir)
    except KeyboardInterrupt as exc:
        interrupt.ignore_cuts()  # the watch did already
        if result is None:  # cut before the run folder existed: nothing to record (the CLI says so in one line)
            raise
        cut(result, exc, where, books, run_key)
        write_manifest_and_report(result, prof, profile_path, started)
        say(f"[run] interrupted by {result.interrupted['signal']} during {where['during']}: stopped "
            f"{len(result.interrupted['stopped_pids'])} process(es); the manifest and report in {run_dir} say so")
    finally:
        if result is not None:  # every exit path, an unexpected error's too: no raw log is left unredacted
            for done in finish_partial_files(result.run_dir, "log cut: the run ended with an error", (run_key,)):
                say(f"[run] {done}")
        shutil.rmtree(runtime, ignore_errors=True)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if result is not None and result.interrupted is None:
            watch.restore()
    return result


def write_manifest_and_report(result: SuiteResult, prof, profile_path: Path, started: str, where: dict | None = None) -> None:
    """manifest.json, then report.html, each whole or not at all (evidence.write_whole). A write that fails — a full
    disk (lab.core.disk.DiskSpaceError names the folder and the bytes), or any error computing them — does not stop
    the other, is said on stderr and in `result.errors` (the run fails, exit 1), and the manifest is written again
    saying the run failed: never "ok" over a report cut short. When even that cannot be written, stderr says so."""
    from lab.records import manifest, report

    run_dir, notebooks = result.run_dir, [asdict(r) for r in result.results]
    cut_run = result.interrupted is not None

    def attempt(what: str, write) -> bool:
        try:
            write()
            return True
        except Exception as exc:  # noqa: BLE001 — the other file and the run's exit status must still come
            result.errors.append(f"{what} not written: {type(exc).__name__}: {exc}")
            say(f"[run] FAILED: {result.errors[-1]}")
            return False

    wrote = attempt("manifest.json", lambda: manifest.write(run_dir, prof, profile_path, started, notebooks,
                                                             interrupted=result.interrupted, ask=not cut_run,
                                                             allow_failed_checks=result.allow_failed_checks))
    if wrote:  # the exit status says what the manifest says (lab.records.manifest.run_status)
        result.failed_checks = manifest.check_counts(run_dir).get("fail", 0)
    if where is not None:
        where["during"] = "the report"
        interrupt.cut_point("report")
    attempt("report.html", lambda: report.build(run_dir))
    if result.errors and wrote:  # the manifest said ok or interrupted before the report failed: say failed instead
        wrote = attempt("manifest.json (again, saying the run failed)", lambda: manifest.write(
            run_dir, prof, profile_path, started, notebooks, interrupted=result.interrupted, ask=False,
            errors=result.errors, allow_failed_checks=result.allow_failed_checks))
    if not wrote and not attempt("manifest.json (the short form)", lambda: manifest.write_failed(
            run_dir, notebooks, result.errors, result.interrupted)):
        say(f"[run] FAILED: {run_dir} has no manifest; the run failed: " + "; ".join(result.errors))


def cut(result: SuiteResult, exc: KeyboardInterrupt, where: dict, books: list[Path], run_key: str) -> None:
    """A cut run's clean-up (signals already ignored): stop every process it started, finish its half-written
    files, and record in `result` what was cut, when, during what, and which notebooks did not run."""
    sig = name_of(exc)
    utc = evidence.utc_now()
    result.interrupted = {"signal": sig, "utc": utc, "notebook": where["notebook"], "during": where["during"]}
    result.interrupted["stopped_pids"] = stop_children()
    result.interrupted["cleaned"] = finish_partial_files(result.run_dir, f"log cut: the run was interrupted by {sig} at {utc}",
                                                         (run_key,))
    done = {r.notebook for r in result.results}
    for book in books:
        if book.stem not in done:
            out_nb = result.run_dir / "notebooks" / book.name
            current = book.stem == where["notebook"]
            result.results.append(NotebookResult(
                book.stem, "interrupted" if current else "not run",
                error=f"{sig} at {utc}" if current else f"not run: {sig} earlier",
                output=str(out_nb.relative_to(result.run_dir)) if out_nb.exists() else None))
