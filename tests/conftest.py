"""Shared by the tests: the tiers (unit / tools / notebooks, see TIERS), the session's shared runs and servers
(cpu_default_run, vllm_server), notebook runs through the real CLI as a user would, the reliability figures."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Helpers beside this file (fake servers, what a split file's tiers share) get pytest's assertion messages too.
pytest.register_assert_rewrite("fake_endpoints", *sorted(p.stem for p in Path(__file__).parent.glob("shared_*.py")))


# Every notebook run of the suite carries planted secrets in its environment (as a user's shell would: a
# Hugging Face token, an OpenAI key) and a known per-run server key; no file of its run folder may hold any.
PLANTED_SECRETS = {"HF_TOKEN": "hf_PlantedHuggingFaceToken0123456789",
                   "OPENAI_API_KEY": "sk-PlantedOpenAIKey0123456789abcdef",
                   "LAB_RUN_API_KEY": "planted-per-run-key-0123456789abcdef"}


def leaked_secrets(run_dir: Path, secrets: dict | None = None) -> tuple[int, list[str]]:
    """(files scanned, 'file: VARIABLE' for every planted value found in a file under run_dir)."""
    secrets = secrets or PLANTED_SECRETS
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    leaks = [f"{p.relative_to(run_dir)}: {name}" for p in files for name, value in secrets.items()
             if value.encode() in p.read_bytes()]
    return len(files), leaks


def lab_run(out: Path, profile: str, only: str, timeout: int = 900, require_ok: bool = True,
            env: dict | None = None) -> Path:
    """`python -m lab run --profile P --only N --out OUT` with planted secrets in the environment; assert it
    succeeded (with require_ok=False: that it made a run folder; each notebook's status is then asserted by
    `notebook_record`) and that no file of the run folder holds a planted secret; return the run folder. `env`: more
    environment for the run and its kernels (the replayed GPU of test_gpu_replay.py)."""
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", profile, "--only", only,
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **PLANTED_SECRETS, **(env or {})})
    said = proc.stdout[-3000:] + proc.stderr[-3000:]
    # 0: notebooks ok, no check failed; 3: notebooks ok, a check failed (the tests assert the checks they expect);
    # 1: a notebook failed (lab.records.runner EXIT_*)
    assert proc.returncode in (0, 3) or (not require_ok and proc.returncode == 1), said
    line = next((l for l in proc.stdout.splitlines() if l.startswith("run folder:")), None)
    assert line, said
    run_dir = Path(line.split(":", 1)[1].strip())
    scanned, leaks = leaked_secrets(run_dir)
    record_figure(f"planted secrets, run --only {only} ({Path(profile).stem}): files without a secret", scanned,
                  scanned - len({leak.split(":")[0] for leak in leaks}), f"leaks: {leaks or 'none'}")
    assert not leaks, leaks
    return run_dir


def read_record(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / "records" / f"{name}.json").read_text())


def notebook_record(run_dir: Path, notebook: str, record: str | None = None) -> dict:
    """The record of `notebook` (e.g. "05_kv_cache_math") in a run folder, after asserting the run's manifest
    says that notebook ran ok (its error otherwise): one notebook's failure fails its own tests only."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [book] = [b for b in manifest["notebooks"] if b["notebook"] == notebook]
    assert book["status"] == "ok", f"{notebook}: {book['status']}: {book.get('error')}"
    return read_record(run_dir, record or notebook)


# Every notebook on cpu-default, as `make run` executes them; see the cpu_default_run fixture.
CPU_DEFAULT_NOTEBOOKS = "01,02,03,04,05,06,07"


def profile_copy(name: str, folder: Path, **changes) -> Path:
    """params/<name>.yaml written to `folder` with the top-level `key: value` lines in `changes` replaced (their
    comments go with them) and every other line as shipped; the copy keeps the profile's name."""
    from lab.core import profile_file

    text = (ROOT / "params" / f"{name}.yaml").read_text()
    for key in changes:
        assert len(re.findall(rf"^{key}:", text, flags=re.M)) == 1, f"params/{name}.yaml: expected one `{key}:` line"
    path = folder / f"{name}.yaml"
    path.write_text(profile_file.set_keys(text, changes))
    return path


# Notebook 06's benchmark plan in the tests' cpu-default run. What its tests assert (every level served, lengths
# from usage, llama-bench at the served depth, the roofline, the ledger) needs neither the shipped 8 requests ×
# 64 tokens per level nor tune's and speculative decoding's 20 s budgets (they run their baseline; the other
# settings and variants are listed as not run; tests/tools/test_speculative_cpu.py measures the variants themselves).
# Each level must still pass the lab's validity rule (lab.measure.metrics.criteria_for: >= 3 s and >= 4 successes),
# or test_suite_07's `lab doctor` rightly reports invalid runs. A plan that stops by COUNT lands near the 3 s floor
# on a fast or idle machine (6 × 32 tokens once ran "6/6 ok in 3.0 s", i.e. 2.9x s): this one stops by DURATION
# (bench_requests is only a cap it never reaches), so every level runs >= 6 s by construction (3 repetitions of 2 s each: lab.measure.load_levels.REPETITIONS;
# each repetition sends at least one request per stream, two at one stream), and the count floor needs 4 requests in 6 s at
# concurrency 1: 16 tokens took ~0.5 s a request here, so only a machine 3x slower
# than a busy CI box misses it (one overloaded to load 9 on 2 cores did: 9 s a request), which test_suite_07 then
# does not count against the run (SPEED_DEPENDENT there: a true finding about that machine, not its subject).
# One llama.cpp thread: with `-t 2` on these 2 cores and one core kept busy by another process, every node of the
# graph waits at a barrier for the second thread's time slice: llama-server decoded 2,791 ms a token where it does
# ~30 (fresh clone of c1fb32f, 2026-12-02, outputs/loop/make-test-20261202T091729Z.json), notebook 06's deadlines
# cut its levels; `-t 1` held 32 tok/s under the same load (the CPU peer check's SERVER_THREADS). The shipped
# profile keeps 2 (both cores of an idle machine); the tests measure the lab's behaviour, not the second core.
CPU_DEFAULT_PLAN = {"bench_requests": 500, "bench_duration_s": 6, "bench_output_tokens": 16, "tune_budget_s": 1,
                    "threads": 1}
# The checks whose verdict is the machine's speed, not the lab's behaviour: a level's validity rule (>= 3 s and
# >= 4 successes), tune's and speculative decoding's baselines inside their 1 s test budgets. On an overloaded box
# they fail truthfully (the record says why); the suite's tests then accept them, and only them, as failed.
SPEED_DEPENDENT_CHECKS = re.compile(r"^(run at concurrency \d+ valid|tuning measured the baseline|"
                                    r"speculative decoding: baseline measured)$")


def speed_cut_levels(record: dict) -> set[int]:
    """The concurrency levels of a 06_benchmark record that an overloaded box cut at their deadlines or left invalid
    (the machine's speed: SPEED_DEPENDENT_CHECKS), after asserting the record says why for each. Tests of figures
    skip these levels' numbers and assert the rest."""
    cut = set()
    for level in record.get("sweep") or []:
        reps = level.get("repetitions") or []
        if not (level.get("validity") or {}).get("valid") or not reps or not all(r.get("successes") for r in reps):
            why = level.get("cut") or (level.get("validity") or {}).get("reasons") or level["validity"].get("warnings")
            assert why, level
            print(f"level {level['concurrency']} cut or not valid on this machine:", why)
            cut.add(level["concurrency"])
    return cut


def failed_checks(run_dir: Path) -> list[str]:
    """The names of every failed check in a run folder's records."""
    from lab.core import run_folder

    return [c["name"] for r in run_folder.read_records(run_dir).values() for c in r.get("checks") or []
            if isinstance(c, dict) and c.get("status") == "fail"]


@pytest.fixture(scope="session")
def cpu_default_profile(tmp_path_factory) -> Path:
    """params/cpu-default.yaml on a free port (notebook 04 starts its server on the profile's port, which another
    run on a shared machine may hold; every other notebook picks free ports) with CPU_DEFAULT_PLAN."""
    from lab.serving import serve

    return profile_copy("cpu-default", tmp_path_factory.mktemp("profile"), port=serve.free_port(), **CPU_DEFAULT_PLAN)


@pytest.fixture(scope="session")
def cpu_default_run(tmp_path_factory, cpu_default_profile) -> Path:
    """The run folder of ONE `lab run` of every notebook on cpu-default (papermill, the real llama.cpp tools and
    server, the report and its Chromium check), shared by the tests of each notebook (test_suite_*.py,
    test_quantize.py's notebook 03, test_kv_parity.py's grid): they assert on the
    records it wrote, each after `notebook_record` checked its notebook's status. Executing the same notebooks
    on the same profile once per test file measured nothing more; it took ~1.5x the time of one run.
    Never beside the background cpu-vllm notebook run: the two together, with one core kept busy by another process,
    starved llama-server to 0.7 tok/s and the deadlines cut notebook 06's levels (fresh clone of 27547dd,
    2026-12-02 07:20, red in test_suite_06 and test_suite_01_02); it waits for that run to end first."""
    if "cpu_vllm_run" in _SESSION:
        _SESSION["cpu_vllm_run"].done.wait()
    return lab_run(tmp_path_factory.mktemp("runs"), str(cpu_default_profile), CPU_DEFAULT_NOTEBOOKS, timeout=3600,
                   require_ok=False)


def vllm_skip_reason() -> str | None:
    """Why the vLLM integration cannot run here (None when it can): `make test` sets it all up."""
    from lab.core import profiles
    from lab.core import paths
    from lab.serving import vllm_env

    if os.environ.get("LAB_VLLM") != "1":
        return ("opt-in: LAB_VLLM is not 1: `make test` sets it (and sets the vLLM engine up); by hand, "
                "`python3 -m lab.setup --engine vllm --profile cpu-vllm` and export LAB_VLLM=1")
    try:
        profile = profiles.load("cpu-vllm")
        paths.engine_python(profile)
        paths.served_model_path(profile)
    except paths.VllmMissing as exc:
        return (f"set-up missing: no vLLM engine venv: {exc} "
                "(run `python3 -m lab.setup --engine vllm --profile cpu-vllm`)")
    return None


VLLM_START_TIMEOUT_S = 420  # measured 35-82 s here; the box is shared with other work
# Threads that run beside the tests (the unit tier's process guard lets them start processes).
BACKGROUND = "lab-test-background"
_SESSION: dict = {}  # what the fixtures and hooks below share: background work, the last user of the vLLM server


class BackgroundRun:
    """`fn()` in its own thread while other tests run; `get()` waits for its value (or raises its error)."""

    def __init__(self, name: str, fn):
        self.done = threading.Event()
        self.value, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn,), name=f"{BACKGROUND}: {name}", daemon=True)
        self.thread.start()

    def _run(self, fn) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for the result
            self.error = exc
        finally:
            self.done.set()

    def get(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class BackgroundServer:
    """A server started by lab.serving.serve in its own thread, which then waits until `finish()` and stops it:
    the start-up runs while other tests do. The thread stays alive as long as the server, because the server's
    parent-death signal (PR_SET_PDEATHSIG, lab.serving.serve) fires when the THREAD that started it ends."""

    def __init__(self, cmd, log_dir: Path, name: str):
        self.ready, self.done = threading.Event(), threading.Event()
        self.server, self.group, self.error = None, None, None
        self.thread = threading.Thread(target=self._run, args=(cmd, log_dir, name), name=f"{BACKGROUND}: {name}",
                                       daemon=True)
        self.thread.start()

    def _run(self, cmd, log_dir: Path, name: str) -> None:
        from lab.serving import serve
        from lab.serving.server import group_members

        t0 = time.monotonic()
        try:
            self.server = serve.start(cmd, log_dir=log_dir, name=name, health_timeout_s=VLLM_START_TIMEOUT_S)
            self.group = group_members(self.server.pid)
            self.server.ready_s = round(time.monotonic() - t0, 1)
        except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for the server
            self.error = exc
        finally:
            self.ready.set()
        if self.server is not None:
            self.done.wait()
            self.server.stop()

    def get(self):
        self.ready.wait()
        if self.error is not None:
            raise self.error
        return self.server, self.group

    def finish(self) -> None:
        self.done.set()
        self.thread.join(timeout=VLLM_START_TIMEOUT_S)


def _uses(session, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session", autouse=True)
def _vllm_early(request, tmp_path_factory):
    """The vLLM work of the session, started in the background so that it overlaps tests that leave a core free.
    The session's vLLM server (when a selected test uses `vllm_server`) starts as the session begins: its start-up
    (~30-70 s here, mostly imports in three processes one after the other) overlaps the unit tier, which runs first
    (see pytest_collection_modifyitems). When the last test using it is done it stops, and the cpu-vllm notebook
    run (`cpu_vllm_run`) starts, beside the tools tier: vLLM's worker keeps to one core (its OpenMP binding), the
    tools tier used ~1.2 cores on average here; measured together 204 s for both, 355 s one after the other.
    Never two vLLM servers at once."""
    _SESSION["tmp"] = tmp_path_factory
    _SESSION["want_cpu_vllm_run"] = _uses(request.session, "cpu_vllm_run") and not vllm_skip_reason()
    if not _uses(request.session, "vllm_server") or vllm_skip_reason():
        _start_cpu_vllm_run()
        yield None
        return
    from lab.core import profiles
    from lab.serving import engines, serve

    profile = profiles.load("cpu-vllm")
    # Exactly the command the notebooks run: no path or environment patched in here.
    cmd = engines.build_command(profile, port=serve.free_port(), installed_version=engines.installed_version(profile))
    _SESSION["vllm"] = BackgroundServer(cmd, tmp_path_factory.mktemp("vllm-logs"), "vllm-cpu")
    yield profile, cmd
    _vllm_server_done()


def _vllm_server_done() -> None:
    """The session's vLLM server stops (if it ran), and the cpu-vllm notebook run starts in its place."""
    if "vllm" in _SESSION:
        _SESSION.pop("vllm").finish()
    _start_cpu_vllm_run()


@pytest.fixture(scope="session")
def vllm_server(_vllm_early):
    """(profile, server, group): the cpu-vllm profile's real vLLM server, started once for the whole session by
    lab.serving.serve with exactly the command the notebooks run; `group` is its process group right after
    start-up (API server, EngineCore, worker, resource tracker). Shared by tests/tools/test_vllm_cpu.py (the lab's own
    path) and tests/notebooks/test_endpoint_vllm.py (to a `lab run` subprocess it is a server the lab did not start, as a
    user's is). vLLM's start-up is most of their time, so it happens once, in the background (_vllm_early);
    the tests that use it run together right after the unit tier, the one marked `stops_vllm_server` last."""
    reason = vllm_skip_reason()
    if reason:
        pytest.skip(reason)
    profile, _ = _vllm_early
    server, group = _SESSION["vllm"].get()
    return profile, server, group


# The cpu-vllm notebooks' benchmark plan in the tests: params/cpu-vllm.yaml on a free port with 4 requests × 16
# tokens per level instead of 8 × 64. What tests/notebooks/test_suite_vllm.py asserts (every level served, output lengths from
# usage, the peer check within its sanity bound) needs no more; the shipped plan took ~1 of its 3 minutes.
CPU_VLLM_PLAN = {"bench_requests": 4, "bench_output_tokens": 16}


def _start_cpu_vllm_run() -> None:
    if _SESSION.pop("want_cpu_vllm_run", False) and "cpu_vllm_run" not in _SESSION:
        from lab.serving import serve

        tmp = _SESSION["tmp"]
        profile = profile_copy("cpu-vllm", tmp.mktemp("profile"), port=serve.free_port(), **CPU_VLLM_PLAN)
        _SESSION["cpu_vllm_run"] = BackgroundRun("cpu-vllm notebooks", lambda: lab_run(
            tmp.mktemp("runs"), str(profile), "04,05,06", timeout=1800))


@pytest.fixture(scope="session")
def cpu_vllm_run(_vllm_early) -> Path:
    """The run folder of `lab run --profile cpu-vllm --only 04,05,06` (CPU_VLLM_PLAN), run in the background beside
    other tests (see _vllm_early) and shared by the tests of tests/notebooks/test_suite_vllm.py."""
    reason = vllm_skip_reason()
    if reason:
        pytest.skip(reason)
    _vllm_server_done()  # when the tests of the session's server did not all run: it stops, this run starts
    return _SESSION["cpu_vllm_run"].get()


def pytest_runtest_teardown(item, nextitem):
    """The session's vLLM server stops after the last test that uses it (~4 GiB of RAM; never beside the vLLM
    servers the cpu-vllm notebooks start), and the cpu-vllm notebook run starts in the background."""
    if item.nodeid == _SESSION.get("last_vllm_user"):
        _vllm_server_done()


# ---------------------------------------------------------------- tiers
# Every test is in one tier, and its file sits in that tier's folder: tests/unit (pure logic in this process),
# tests/tools (real processes: llama.cpp's tools, the vLLM server, the lab's CLI, Jupyter, Chromium, peer clients),
# tests/notebooks (whole notebooks executed: `lab run` or papermill). The folder gives the marker (pyproject registers
# them; README "Testing" says how to run each), so `pytest tests/tools` and `pytest -m tools` are the same tests; a
# test marked for another tier than its folder's (`tools`, `integration` or `vllm` mean tools) stops the run,
# naming it: .ci/tier_tests.py moves it. Helpers shared by several files stay here or in tests/*.py beside this
# file (fake_endpoints.py, shared_*.py). A unit test that starts a process fails, naming the process: the unit
# tier stays fast. In CI (CI=true) a test whose set-up is missing fails instead of skipping: see setup_missing.
TIERS = ("unit", "tools", "notebooks")
TESTS = Path(__file__).resolve().parent


def marked_tier(item) -> str | None:
    """The tier a test's markers name (None when unmarked)."""
    if item.get_closest_marker("notebooks"):
        return "notebooks"
    if any(item.get_closest_marker(m) for m in ("tools", "integration", "vllm")):
        return "tools"
    return "unit" if item.get_closest_marker("unit") else None


def folder_tier(item) -> str | None:
    """The tier of the folder a test's file sits in (None outside tests/<tier>/)."""
    folder = Path(item.path).parent
    return folder.name if folder.parent == TESTS and folder.name in TIERS else None


def tier_of(item) -> str:
    return folder_tier(item) or marked_tier(item) or "unit"


# Test files left out of `make test-quick` (the feedback loop) and run by `make test` (CI): the costliest checks of a
# path `make test-quick` reaches another way. Named here, not in the files, so that a file split again by
# .ci/tier_tests.py keeps it. Seconds: fresh-clone `make test`s on the 2-core CI machine (outputs/loop/).
SLOW = {
    "test_papermill_native.py": "papermill by hand on 01 (27-44 s); make test-quick runs every notebook through "
                                "`lab run`",
    "test_endpoint_llama.py": "two `lab run`s against a llama-server the lab did not start (~60 s); make test-quick "
                              "keeps the endpoint probes against it (tests/tools/test_endpoint_llama_tools.py)",
    "test_speculative_cpu.py": "speculative decoding's variants on the real server (32-73 s); make test-quick's "
                               "notebook 06 runs the baselines",
    "test_synth_tools.py": "the synthesized GGUFs in llama-bench, the bindings and llama-server (26-37 s); make "
                           "test-quick's notebook 05 serves the synthesized Qwen3.8 hybrid in its KV grid",
}


def in_ci() -> bool:
    """CI services (and .ci/run) export CI=true."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# Skips that stay skips in CI: a test not meant for this machine or not asked for. Any other skip of a tools or
# notebooks test fails in CI (pytest_runtest_makereport below): there it means a broken set-up.
SKIP_IN_CI = ("opt-in", "not for this machine")


def setup_missing(what: str, command: str | None = None) -> None:
    """A test cannot run because `what` is not set up (the message, or `command`, says what sets it up): a skip
    for a developer without the tools, a failure in CI, where set-up ran just before (a broken build must not
    pass as skips). The tools and notebooks tiers' other skips are held to the same rule in CI (SKIP_IN_CI)."""
    message = f"set-up missing: {what}" + (f" (run `{command}`)" if command else "")
    if in_ci():
        pytest.fail(f"{message}; in CI (CI={os.environ['CI']}) `make test` sets it up first", pytrace=False)
    pytest.skip(message)


def pytest_configure(config):
    # A shell that starts `make test` in the background (`cmd &` without job control) hands every child SIGINT as
    # "ignored"; Python then installs no KeyboardInterrupt handler, and the tests that cut runs with SIGINT (as Ctrl-C
    # in a terminal does) see nothing happen (seen: CI started with `&`, 2026-12-01: "SIGINT ...: exit 0"). Tests run
    # as from a terminal: SIGINT raises here, and children (a handler is reset on exec) start with the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "stops_vllm_server: stops the session's shared vLLM server (runs after every "
                                       "other test that uses it)")


def pytest_collection_modifyitems(config, items):
    """Tier markers first (see TIERS). Then the order: the unit tier first (fast answers, and the session's vLLM
    server starts in the background meanwhile), then the tests of that server together, the one that stops it
    (`stops_vllm_server`) last of them, then the tools tier (the cpu-vllm notebooks run beside it, see _vllm_early),
    then the notebooks tier; within each group pytest's own order."""
    both = [item.nodeid for item in items if item.get_closest_marker("notebooks")
            and (item.get_closest_marker("tools") or item.get_closest_marker("integration"))]
    if both:  # `-m tools` would select them too: each test is in one tier
        raise pytest.UsageError(f"marked both notebooks and tools (mark the tests, not their module): {both}")
    astray = [f"{item.nodeid} (marked {marked_tier(item)})" for item in items
              if marked_tier(item) and folder_tier(item) != marked_tier(item)]
    if astray and os.environ.get("LAB_TIER_TESTS") != "1":  # .ci/tier_tests.py collects to put them in place
        more = f" and {len(astray) - 5} more" if len(astray) > 5 else ""
        raise pytest.UsageError(f"tests outside their tier's folder tests/<tier>/: {astray[:5]}{more}; run "
                                "`.venv/bin/python .ci/tier_tests.py move` then `split` (or move them by hand)")
    for item in items:
        tier = tier_of(item)
        item.add_marker(tier)
        if Path(item.path).name in SLOW:
            item.add_marker("slow")
        if tier != "unit":
            item.add_marker("integration")  # `-m "not integration"` keeps meaning the unit tier

    def rank(item) -> int:
        tier = tier_of(item)
        if tier == "unit":
            return 0
        if item.get_closest_marker("stops_vllm_server"):
            return 2
        if "vllm_server" in getattr(item, "fixturenames", ()):
            return 1
        return 3 if tier == "tools" else 4

    items.sort(key=rank)  # stable: the order within each group is pytest's own


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI, a tools or notebooks test that skipped for any reason but SKIP_IN_CI failed: its set-up is broken."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci() and tier_of(item) != "unit") or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not reason.removeprefix("Skipped: ").startswith(SKIP_IN_CI):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CI={os.environ.get('CI')}), where every set-up ran: {reason}"


def pytest_collection_finish(session):
    users = [item.nodeid for item in session.items if "vllm_server" in getattr(item, "fixturenames", ())]
    _SESSION["last_vllm_user"] = users[-1] if users else None


# What a unit test may still start: the provenance every record carries asks `git rev-parse HEAD`, and Python's
# platform.processor() asks `uname -p` (milliseconds each, no engine, no model).
UNIT_ALLOWED = {"git", "uname"}


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """In the unit tier, starting a process (other than UNIT_ALLOWED, or one that does not exist and so raises) is an
    error that says which tier the test belongs to."""
    if tier_of(request.node) != "unit":
        return
    execute_child = subprocess.Popen._execute_child

    def refuse(self, args, executable, *rest, **kwargs):
        if threading.current_thread().name.startswith(BACKGROUND):  # the session's vLLM work, run meanwhile
            return execute_child(self, args, executable, *rest, **kwargs)
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        program = os.fsdecode(executable or argv[0])
        found = shutil.which(program) if os.sep not in program else (program if os.path.exists(program) else None)
        if found and os.path.basename(program) not in UNIT_ALLOWED:
            raise AssertionError(f"a unit test started a process ({argv!r}); mark the test `pytest.mark.tools` (or "
                                 "`notebooks` if it executes whole notebooks): see TIERS in tests/conftest.py")
        return execute_child(self, args, executable, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


# ---------------------------------------------------------------- reliability figures
# Tests of bad input, interrupts, exposure and secrets report "N tried / N handled"; the figures are
# printed at the end of every pytest run (also without -s), so `make test` output carries them.
FIGURES: list[tuple[str, int, int, str]] = []


# The peer-client check's one line (lab ÷ llama-benchy, guidellm per metric: tests/unit/test_peer_clients.py), printed the same way.
PEER_LINES: list[str] = []


def record_figure(name: str, tried: int, handled: int, note: str = "") -> None:
    """One line of the summary; the same figure recorded twice (a module-level tally shared by a file's tiers,
    e.g. tests/shared_reliability_exposure.py's, ends once per file) is shown once."""
    if (name, tried, handled, note) not in FIGURES:
        FIGURES.append((name, tried, handled, note))


def pytest_terminal_summary(terminalreporter):
    if PEER_LINES:
        terminalreporter.section("peer clients (lab.experiments.peer_clients)")
        for line in PEER_LINES:
            terminalreporter.write_line(line)
    if not FIGURES:
        return
    terminalreporter.section("reliability figures (tried / handled)")
    for name, tried, handled, note in FIGURES:
        terminalreporter.write_line(f"{name}: {tried} tried / {handled} handled" + (f" ({note})" if note else ""))


# The vLLM tensor-parallel set-up on two V100s that the pure tests of the vLLM path use (command, roofline,
# compat facts). It is not a shipped profile: no official vLLM serves the seeds' Qwen3.8-27B on Volta (compat
# rule vllm_serves_hybrid_on_volta), so params/v100-32g-x2-nvlink.yaml serves it with llama.cpp; this one is
# a model vLLM 0.10.1.1 does load on Volta (dense Qwen3-32B, GPTQ 4-bit, fp16).
V100_X2_VLLM = dict(
    name="v100-32g-x2-vllm-test", description="two V100 SXM2 32GB, vLLM 0.10.1.1 TP 2, Qwen3-32B GPTQ-INT4",
    gpu_name_pattern="V100-SXM2-32GB", gpu_count=2, gpu_vram_mib=32768, gpu_compute_capability="7.0",
    nvlink_expected=True, gpu_memory_bandwidth_gb_s=900, gpu_tdp_w=300, host_ram_gib_min=64,
    driver_version="580.65.06", cuda_toolkit="12.8", torch_version="2.7.1", torch_cuda_wheel="cu126",
    engine="vllm", engine_version="0.10.1.1", engine_python=".venv-vllm/bin/python",
    model_name="Qwen3-32B-GPTQ-Int4", model_architecture="config:qwen3-32b", model_quant="GPTQ-INT4",
    context_tokens=32768, parallel_slots=16, gpu_memory_utilization=0.9, dtype="half", kv_cache_dtype="auto",
    tensor_parallel_size=2, port=8000, bench_prompt_tokens=512, bench_output_tokens=256,
    bench_concurrency=[1, 4, 8, 16], bench_requests=64, bench_duration_s=120)


def v100_x2_vllm():
    from lab.core.profiles import Profile

    return Profile(**V100_X2_VLLM)


@pytest.fixture(scope="module")
def smol_model():
    """The embedded SmolLM2 GGUF, or a skip that says what set-up is missing (a failure in CI: setup_missing)."""
    from lab.core import paths

    try:
        paths.tool("llama-server")
        return paths.embedded_model("smollm2")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))


def cmdline(pid: int) -> list[str]:
    """A process's command line, [] when it has gone meanwhile. Tests that look for a process they may have
    started match its command line: other children of this process come and go (conftest.BackgroundRun)."""
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def wait_for(condition, timeout_s: float = 60.0, every_s: float = 0.05) -> bool:
    """Whether `condition()` came true within `timeout_s` (checked every `every_s`). Tests wait for what they
    need this way instead of sleeping a fixed time and counting: the deadline is generous, so a loaded
    machine only makes the wait longer, never the assertion false."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return bool(condition())
        time.sleep(every_s)
    return True


def cli_output(argv: list[str]) -> tuple[int, str]:
    """Exit code and everything printed by `python -m lab ARGV`, in-process; argparse's usage error is its exit
    status 2 and its message, as a user sees them; anything else escaping lab's entry point comes back as rc -1
    and a 'Traceback:' line (what a user would see)."""
    import contextlib
    import io

    from lab import __main__ as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.entry(argv)
        except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0, after printing what to do
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - anything escaping entry() is a traceback for a user
            rc, err = -1, io.StringIO(f"Traceback: {type(exc).__name__}: {exc}")
    return rc, out.getvalue() + err.getvalue()


@pytest.fixture
def clean_display(monkeypatch):
    """session.start sets pandas and plotly options for the whole process (as a kernel wants): put them back."""
    import pandas as pd
    import plotly.io as pio

    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    with pd.option_context("display.max_rows", 60, "display.max_colwidth", 50, "display.max_columns", 20,
                           "display.width", 80):
        yield
