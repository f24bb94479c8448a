"""`lab run` cut by SIGINT and SIGTERM at random points (in kernel start-up, in cells, mid-server-start), with
planted secrets in its environment and the profile's key: nothing is left running, no kernel connection
file or raw log stays, one line instead of tracebacks, the cut run folder's manifest and report say what was
cut, when and where, and no file of it (nor `lab doctor --json`, nor `lab compare` on it) holds a planted
secret. Each cut run after the first starts its server again on the same port (the next run works; the
suite's full runs, tests/test_suite_*.py, follow with the same planted secrets: see conftest.lab_run).

On 2 shared cores one `lab run --only 04` takes ~20 s to reach the server start, so the default is 4 cut
runs (per signal: one mid-server-start, one at a random second); LAB_INTERRUPT_RUNS=N runs N random ones
per signal instead of one."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import PLANTED_SECRETS, ROOT, leaked_secrets, record_figure

pytestmark = pytest.mark.notebooks  # `lab run` cut while it executes notebook 04

RANDOM_RUNS = int(os.environ.get("LAB_INTERRUPT_RUNS", "1"))
PLANTED = {**PLANTED_SECRETS, "LAB_PLANTED_KEY": "planted-profile-key-0123456789abcdef"}


def _profile(tmp_path: Path) -> Path:
    """cpu-default on a free port (other tests may hold 8080), with a key variable the server must use."""
    from lab.serving import serve

    data = yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text())
    data.update(port=serve.free_port(), api_key_env="LAB_PLANTED_KEY")
    path = tmp_path / "cpu-default-planted.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _env(tmp_path: Path) -> dict:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**os.environ, **PLANTED, "TMPDIR": str(tmp_path / "tmp"), "PYTHONUNBUFFERED": "1"}


def _watch(proc: subprocess.Popen, until, timeout_s: float) -> set[int]:
    """Poll the run's descendants (kernel, server) until `until()` or the timeout; return every pid seen."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and not until():
        try:
            seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.Error:
            pass
        time.sleep(0.1)
    return seen


def _alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _cut_run(tmp_path: Path, profile: Path, sig: int, mode: str, delay_s: float) -> tuple[bool | None, str]:
    out = tmp_path / "runs"
    before = set(out.iterdir()) if out.exists() else set()
    proc = subprocess.Popen([sys.executable, "-m", "lab", "run", "--profile", str(profile), "--only", "04",
                             "--out", str(out)], cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    partial = lambda: any(out.glob("*/logs/.*.partial")) if out.exists() else False  # noqa: E731
    seen = _watch(proc, partial if mode == "mid-server-start" else lambda: False,
                  90 if mode == "mid-server-start" else delay_s)
    if mode == "mid-server-start":
        time.sleep(delay_s)
    seen |= _watch(proc, lambda: True, 0)
    if proc.poll() is not None:  # the run ended before the cut (a busy box can miss the server's start): no sample
        proc.communicate()
        return None, f"{signal.Signals(sig).name} {mode} +{delay_s:.1f}s: the run ended (exit {proc.returncode}) before the cut"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    time.sleep(0.5)
    problems = []
    name = signal.Signals(sig).name
    if proc.returncode != {"SIGINT": 130, "SIGTERM": 143}[name]:
        problems.append(f"exit {proc.returncode}")
    text = "\n".join(l for l in (stdout + stderr).splitlines() if "Executing" not in l)
    said = [l for l in text.splitlines() if l.startswith(("[run] interrupted", "interrupted ("))]
    if proc.returncode == 0 and not said and "checks:" in stdout:  # it had finished and said so: no cut to judge
        return None, f"{name} {mode} +{delay_s:.1f}s: the run had finished before the cut"
    if "Traceback" in text or len(said) != 1:
        problems.append(f"output not one line: {text[-800:]}")
    if _alive(seen):
        problems.append(f"left running: {[(p, psutil.Process(p).name()) for p in _alive(seen)]}")
    new = sorted(set(out.iterdir()) - before) if out.exists() else []
    if not new and "[run] profile" not in text and not problems:
        pass  # cut before the run folder was made: nothing to leave behind, and it said so in one line
    elif len(new) != 1:
        problems.append(f"{len(new)} run folders")
    else:
        run = new[0]
        leftovers = [str(p.relative_to(run)) for p in run.rglob("*") if p.name.endswith(".partial")]
        if leftovers:
            problems.append(f"partial files left: {leftovers}")
        try:
            cut = json.loads((run / "manifest.json").read_text()).get("interrupted") or {}
        except (OSError, ValueError) as exc:
            cut = {"error": str(exc)}
        if cut.get("signal") != name or not cut.get("utc") or cut.get("notebook") != "04_serve":
            problems.append(f"manifest says {cut}")
        report = (run / "report.html").read_text() if (run / "report.html").exists() else ""
        if "This run was cut" not in report:
            problems.append("report does not say the run was cut")
        _, leaks = leaked_secrets(run, PLANTED)
        if leaks:
            problems.append(f"planted secrets found: {leaks}")
    # kernel connection files (ports + HMAC key) and the runner's private runtime folder are gone
    tmp_left = [str(p) for p in (tmp_path / "tmp").rglob("*") if p.name.startswith("lab-run-") or
                (p.suffix == ".json" and p.is_file() and b"signature_scheme" in p.read_bytes())]
    if tmp_left:
        problems.append(f"left in TMPDIR: {tmp_left[:5]}")
    return not problems, f"{name} {mode} +{delay_s:.1f}s: " + ("ok" if not problems else "; ".join(problems))


def _cut_until_cut(tmp_path: Path, profile: Path, sig: int, mode: str, delay_s: float, tries: int = 3) -> tuple[bool, str]:
    """A cut run; again (up to `tries`) when the run ended before the signal was sent, which tests nothing."""
    for _ in range(tries):
        ok, msg = _cut_run(tmp_path, profile, sig, mode, delay_s)
        if ok is not None:
            return ok, msg
    return False, msg


def test_cut_runs_leave_nothing_behind_and_say_so(tmp_path):
    profile = _profile(tmp_path)
    rng = random.Random(int(time.time()))
    plan = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        plan.append((sig, "mid-server-start", rng.uniform(0.0, 1.0)))
        # notebook 04 alone is a ~7 s run here (start-up, 5 s of notebook, the report): cut inside it
        plan += [(sig, "random", rng.uniform(1.5, 6.0)) for _ in range(RANDOM_RUNS)]
    outcomes = [_cut_until_cut(tmp_path, profile, *p) for p in plan]
    handled = sum(ok for ok, _ in outcomes)
    record_figure("lab run interrupted (SIGINT/SIGTERM, --only 04)", len(outcomes), handled,
                  "; ".join(msg for _, msg in outcomes))
    assert handled == len(outcomes), "\n".join(msg for ok, msg in outcomes if not ok)
    _doctor_and_compare_keep_no_secret(tmp_path)


def _doctor_and_compare_keep_no_secret(tmp_path: Path) -> None:
    runs = sorted((tmp_path / "runs").iterdir())
    outputs = {}
    for argv in (["doctor", "--json", "--run", str(runs[-1])], ["compare", *map(str, runs)]):
        res = subprocess.run([sys.executable, "-m", "lab", *argv], cwd=ROOT, env=_env(tmp_path),
                             capture_output=True, timeout=300)
        assert res.returncode in (0, 1) and b"Traceback" not in res.stderr, res.stderr[-2000:]
        outputs[f"lab {argv[0]}"] = res.stdout + res.stderr
    leaks = [f"{where}: {name}" for where, data in outputs.items() for name, value in PLANTED.items()
             if value.encode() in data]
    record_figure("planted secrets in `lab doctor --json` and `lab compare` output", len(outputs),
                  len(outputs) - len({leak.split(":")[0] for leak in leaks}), f"leaks: {leaks or 'none'}")
    assert not leaks, leaks
