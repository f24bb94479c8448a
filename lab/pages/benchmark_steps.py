"""Notebook 06's steps, each result kept as its cell runs it (lab.pages.benchmark_run runs them), so the page builds
the 06_benchmark record from what was measured (lab.pages.benchmark.record), not a cell wiring a dozen variables
set twenty cells apart. A cell run again replaces its step's result; the profile is the one the latest step ran
with (notebook 06 adds the request count and time budget to it before the sweep)."""
from __future__ import annotations

from dataclasses import dataclass

from lab.core.profiles import Profile
from lab.core.session import Session
from lab.measure import bench, metrics
from lab.pages import benchmark_run
from lab.pages.benchmark_run import ServedSweep


@dataclass
class Steps:
    s: Session
    profile: Profile | None = None
    rl: dict | None = None
    served: ServedSweep | None = None
    llama_bench: tuple = (None, "not run yet")
    batched: tuple = (None, "not run yet")
    capacity: dict | None = None

    def roofline(self, profile: Profile) -> dict:
        self.profile, self.rl = profile, benchmark_run.roofline(profile, self.s.run_dir)
        return self.rl

    def serve_and_sweep(self, profile: Profile) -> ServedSweep:
        self.profile, self.served = profile, benchmark_run.serve_and_sweep(profile, self.s.run_dir, self.s.logs)
        return self.served

    def in_process(self) -> tuple[dict | None, str | None]:
        self.llama_bench = benchmark_run.in_process(self.profile, self.served.summaries)
        return self.llama_bench

    def in_process_batched(self) -> tuple[dict | None, str | None]:
        self.batched = benchmark_run.in_process_batched(self.profile, self.served, self.s.logs)
        return self.batched

    def client_capacity(self, **kwargs) -> dict:
        self.capacity = bench.client_capacity(**kwargs)
        return self.capacity

    # what follows from the steps above, computed the one way each time it is shown or recorded
    def yardstick(self) -> list[dict]:
        return benchmark_run.yardstick_rows(self.served, self.batched[0], self.llama_bench[0])

    def queue(self) -> list[dict]:
        return metrics.queueing(self.served.summaries)

    def claim_verdicts(self) -> list:
        return benchmark_run.claim_verdicts(self.profile, self.served.summaries)

    def checks(self) -> list:
        return benchmark_run.checks(self.profile, self.served, self.llama_bench[0], self.rl, self.capacity, self.queue())
