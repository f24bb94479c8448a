"""The tools tier of tests/notebooks/test_endpoint_llama.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
from __future__ import annotations

import pytest

from lab.core import profiles
from lab.measure import load_levels, loadgen, metrics
from lab.diagnose import endpoint_diagnose
from shared_endpoint_llama import endpoint_profile, llama_server_tool, start_outside_the_lab, stop


@pytest.fixture(scope="module")
def open_serial_server(llama_server_tool, tmp_path_factory):
    log = tmp_path_factory.mktemp("serial") / "llama-server.log"
    proc, base = start_outside_the_lab(*llama_server_tool, log, slots=1, ctx=512)
    yield base
    stop(proc)


@pytest.mark.tools
def test_one_slot_queues_and_is_flagged(open_serial_server, tmp_path):
    """-np 1: the second stream waits for the first. The verdict compares two time windows (one stream, then two),
    so a burst of other work on a shared machine during one of them can hide the queueing once (it did, once in
    four clean CI runs); a person would measure again: up to three sweeps, and one must flag it. A server that
    batched would fail all three (its two streams overlap: no wait, throughput up)."""
    target = loadgen.Target(open_serial_server, model="any", max_tokens=48)  # decode, not per-request overhead, dominates: a serial server cannot overlap it
    attempts = []
    for _ in range(3):
        runs = load_levels.sweep(target, [1, 2], requests_per_level=6, prompt_words=24)
        queue = metrics.queueing([metrics.summarise_run(r) for r in runs])
        attempts.append({k: queue[1][k] for k in ("queued", "wait_vs_serial", "throughput_gain")})
        if queue[1]["queued"]:
            break
    assert attempts[-1]["queued"] is True, attempts
    assert attempts[-1]["wait_vs_serial"] > 0.5 and attempts[-1]["throughput_gain"] < 1.25, attempts


@pytest.mark.tools
def test_open_server_diagnosed_by_its_own_answers(open_serial_server, tmp_path):
    profile = profiles.load(endpoint_profile(tmp_path, open_serial_server, key_env=None, ctx=512, slots=1))
    probes = {p["probe"]: p for p in endpoint_diagnose.run(profile)["probes"]}
    assert probes["key"]["verdict"] == "the server needs no key" and probes["key"]["severity"] == "pass"
    assert probes["name"]["status"] == 200  # llama-server serves its one model whatever the name
    ctx = probes["context"]
    assert ctx["status"] == 400 and ctx["kb"][0] == "llamacpp-context-exceeded" and ctx["context"] == 512
    assert "exceeds the available context size" in ctx["answer"]
