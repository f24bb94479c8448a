"""The tools tier of tests/unit/test_peer_clients.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
from __future__ import annotations

import os

import pytest

from conftest import PEER_LINES, setup_missing
from lab.experiments import peer_clients, peer_verdicts
from lab.measure import peer_tools
from lab.measure.peer_bench import PeerLoad


TEST_LOAD = PeerLoad(num_prompts=8, concurrency=1, input_tokens=128, output_tokens=32)


@pytest.mark.tools
def test_lab_client_agrees_with_llama_benchy_and_guidellm_on_a_real_server(tmp_path):
    if os.environ.get("LAB_PEERS") != "1":
        pytest.skip("opt-in: LAB_PEERS is not 1 (`make test` sets it)")
    why = peer_tools.skip_reason()
    if why:
        setup_missing(why)
    # One repetition of a light load (~3-5 min on the loaded 2-core CI box): the repeated measurement, with the spread,
    # is `python -m lab.experiments.peer_clients --profile cpu-default ... --repetitions 3` (outputs/peer_clients-cpu/).
    record = peer_clients.run_on_smollm2(tmp_path, load=TEST_LOAD, repetitions=1)
    print(peer_clients.text(record))
    PEER_LINES.append(peer_clients.headline(record) + f" ({tmp_path / 'peer_clients' / 'peer_clients.json'})")
    n, o = record["load"]["num_prompts"], record["load"]["output_tokens"]
    assert {(r["tool"], r["concurrency"]) for r in record["results"]} == {(t, c) for t in peer_clients.DEFAULT_TOOLS
                                                                          for c in peer_clients.LEVELS}
    for r in record["results"]:
        assert r["run"]["error"] is None, r["run"]["error"]
        # what does not depend on the machine's load: every request accounted for, exactly O tokens out
        assert r["lab"]["successes"] == n and r["lab"]["output_tokens_mean"] == o, r["lab"]
        assert r["theirs"]["successes"] + r["theirs"]["failures"] == n, r["theirs"]
        assert r["theirs"]["successes"] >= 1
        if r["tool"] == "guidellm":
            assert r["theirs"]["output_tokens_mean"] == o and r["theirs"]["failures"] == 0
    for row in record["ratios"]:
        print(row)
        # a ratio beyond ±5 % without a definition behind it is a warning (the clients ran back to back on a shared
        # CPU), not a failure; each one that a definition explains says which
        if peer_verdicts.verdict(row) == "definition" and "per stream chunk" not in row["why they differ"]:
            assert row["why they differ"] == peer_verdicts.EXPLAIN[(row["tool"], row["metric"])], row
    for r in record["results"]:  # the referee: the server's own log found each run's requests, O tokens each
        # (theirs only when every one of their requests finished: llama-benchy's "Server disconnected" ones do not)
        for side in ("lab", "theirs") if not r["theirs"]["failures"] else ("lab",):
            assert r["server_clock"][side]["requests"] == n and r["server_clock"][side]["output_tokens"] == n * o, r
    statuses = {c.status for c in peer_clients.checks(record)}
    assert "fail" not in statuses
    assert (tmp_path / "peer_clients" / "peer_clients.json").exists()
