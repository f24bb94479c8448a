"""Shared helpers for the tier-3 tests: run notebooks through the real CLI, as a user would."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lab_run(out: Path, profile: str, only: str, timeout: int = 900) -> Path:
    """`python -m lab run --profile P --only N --out OUT`; assert it succeeded; return the run folder."""
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", profile, "--only", only,
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("run folder:"))
    return Path(line.split(":", 1)[1].strip())


def read_record(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / "records" / f"{name}.json").read_text())


def vllm_skip_reason() -> str | None:
    """Why the vLLM integration cannot run here (None when it can): `make test` sets it all up."""
    from lab import profiles, vllm_env

    if os.environ.get("LAB_VLLM") != "1":
        return "LAB_VLLM is not 1: `make test` sets it (and sets the vLLM engine up); by hand, export LAB_VLLM=1"
    try:
        profile = profiles.load("cpu-vllm")
        vllm_env.engine_python(profile)
        vllm_env.served_model_path(profile)
    except vllm_env.VllmMissing as exc:
        return f"no vLLM engine venv: {exc}"
    return None


# ---------------------------------------------------------------- reliability figures
# Tests of bad input, interrupts, exposure and secrets report "N tried / N handled"; the figures are
# printed at the end of every pytest run (also without -s), so `make test` output carries them.
FIGURES: list[tuple[str, int, int, str]] = []


def record_figure(name: str, tried: int, handled: int, note: str = "") -> None:
    FIGURES.append((name, tried, handled, note))


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("reliability figures (tried / handled)")
    for name, tried, handled, note in FIGURES:
        terminalreporter.write_line(f"{name}: {tried} tried / {handled} handled" + (f" ({note})" if note else ""))
