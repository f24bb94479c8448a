"""The tools tier of tests/unit/test_reliability_deadlines.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
from __future__ import annotations

import time

import pytest

from conftest import record_figure

from lab.core import profiles
from lab.measure import load_levels, loadgen
from lab.serving import engines, serve
from shared_reliability_deadlines import BOUND_S, BUDGET_S


@pytest.mark.tools
def test_a_sigstopped_llama_server_ends_the_level_at_its_deadline(smol_model, tmp_path):
    """The real thing: llama-server (SmolLM2, CPU) frozen with SIGSTOP after it answered; the sweep's first level ends
    at bench_duration_s + grace (2 + 2 s) with every request failed and the reason, the levels after it not run.
    The bug: notebook 06 took 1,557 s against a 20 s budget."""
    import os
    import signal

    cmd = engines.build_command(profiles.load("cpu-default"), port=serve.free_port(), model_path=smol_model)
    with serve.start(cmd, log_dir=tmp_path / "logs", name="frozen", health_timeout_s=120) as srv:
        target = loadgen.Target(srv.base_url, model=serve.model_name(srv), max_tokens=8, api_key=srv.api_key)
        os.kill(srv.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            runs = load_levels.sweep(target, [1, 2], 4, 8, duration_s=BUDGET_S, seed=8, repetitions=2,
                                 warmup_max_rounds=2, grace_s=BUDGET_S)
            took = time.monotonic() - t0
        finally:
            os.kill(srv.pid, signal.SIGCONT)
    record_figure("sweep on a SIGSTOPped llama-server ended by the level's deadline", 1,
                  int(took < BOUND_S and len(runs) == 1 and bool(runs[0].cut)), f"{took:.1f} s, budget 2 s + 2 s grace")
    assert took < BOUND_S, took
    assert len(runs) == 1 and "levels after it (2) were not run" in runs[0].cut
    assert all((r.error or "").startswith("deadline: the level at concurrency 1") for r in runs[0].warmup + runs[0].results)
