"""`lab run --profile all` (or "a,b"): one `lab run` per profile, in order, each into its own run folder; a profile
that fails validation is reported and skipped, a failed notebook fails its profile, not the batch, and a signal stops
the batch after the cut run. Its exit status: lab.records.runner's table (BATCH_FAILED_BASE + the failed count).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import profiles
from lab.records import runner  # runner.run by attribute: the tests stand a fake in for it
from lab.records.runner import BATCH_FAILED_BASE, BATCH_FAILED_MAX, EXIT_CHECKS_FAILED, EXIT_OK, SuiteResult


ASKED_PLAN = "--plan-only"


@dataclass
class BatchResult:
    runs: dict[str, SuiteResult] = field(default_factory=dict)  # profile (as given) → its run
    invalid: dict[str, str] = field(default_factory=dict)  # profile (as given) → why it was not run
    interrupted: SuiteResult | None = None  # the run a signal cut: the batch stops there

    @property
    def failed(self) -> list[str]:
        return list(self.invalid) + [p for p, r in self.runs.items() if not r.ok]

    @property
    def checks_failed(self) -> list[str]:
        """Profiles whose notebooks all ran but a check failed (not counted with --allow-failed-checks)."""
        return [p for p, r in self.runs.items() if r.ok and r.checks_failed]

    @property
    def exit_code(self) -> int:
        """BATCH_FAILED_BASE + the number of profiles that failed (invalid, or a notebook not ok; at most 100, so
        11..110: never a signal's 129/130/143); else EXIT_CHECKS_FAILED when a profile's checks failed, else EXIT_OK.
        A cut batch exits as its cut run does."""
        if self.interrupted is not None:
            return self.interrupted.exit_code
        if self.failed:
            return BATCH_FAILED_BASE + min(len(self.failed), BATCH_FAILED_MAX)
        return EXIT_CHECKS_FAILED if self.checks_failed else EXIT_OK


def batch_profiles(spec: str) -> list[str] | None:
    """`--profile all` → every params/*.yaml; "a,b" → those; one profile → None (not a batch)."""
    if spec == "all":
        return [str(p) for p in profiles.all_profiles()]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    return names if len(names) > 1 else None


def run_batch(names: list[str], only: list[str] | None = None, out: str | None = None,
              synth_if_missing: bool = False, plan_only: bool = False,
              allow_failed_checks: bool = False) -> BatchResult:
    """One `run` per profile, in order, each into its own run folder (under OUT/<profile>/ when --out is given). A
    profile that fails validation is reported and skipped; a failed notebook fails its profile, not the batch; a
    signal stops the batch after the cut run has written its manifest and report. A profile whose GPUs are not on
    this machine runs in plan mode (lab.core.planmode), and its progress line says so; plan_only: every profile."""
    from lab.core import planmode

    batch = BatchResult()
    runner.discover(only)  # a bad --only is bad usage before anything runs
    t0 = time.monotonic()
    for i, name in enumerate(names, 1):
        label = f"[batch] {i}/{len(names)} {Path(name).stem if name.endswith(('.yaml', '.yml')) else name}"
        try:
            prof = profiles.load(name)
        except profiles.ProfileError as exc:
            batch.invalid[name] = str(exc)
            print(f"{label}: invalid, skipped: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
            continue
        plan = planmode.reason(prof) or (ASKED_PLAN if plan_only else None)
        print(f"{label} ..." + (f" (plan mode: {plan})" if plan else ""), file=sys.stderr, flush=True)
        res = runner.run(name, only=only, out=str(Path(out) / prof.name) if out else None,
                         synth_if_missing=synth_if_missing, plan_only=plan_only, allow_failed_checks=allow_failed_checks)
        batch.runs[name] = res
        if res.interrupted:
            batch.interrupted = res
            print(f"{label}: interrupted; the batch stops ({len(names) - i} profile(s) not run)", file=sys.stderr,
                  flush=True)
            break
        bad = [r.notebook for r in res.results if r.status != "ok"]
        state = ("not ok: " + ", ".join(bad) if not res.ok else
                 f"ok, {res.failed_checks} check(s) failed" if res.failed_checks else "ok")
        print(f"{label}: {state} → {res.run_dir} "
              f"({time.monotonic() - t0:.0f} s into the batch; {len(batch.failed)} failed so far)",
              file=sys.stderr, flush=True)
    return batch
