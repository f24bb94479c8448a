"""The server's own clock as referee of the peer check (lab.serving.engine_logs.request_timings,
lab.measure.server_clock, peer_verdicts.rejudge): llama-server's per-request lines parsed, runs found in a log,
and the committed H200 record judged again from its own server log."""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from lab.experiments import peer_verdicts
from lab.measure import server_clock
from lab.serving import engine_logs
from conftest import ROOT

pytestmark = pytest.mark.unit

H200 = ROOT / "outputs" / "peer_clients-h200" / "20261202T053002Z_54fe515"

# Lines as llama-server (the pinned llama.cpp, -lv 4) wrote them on the H200 (peer_clients.log.xz above), one request
# of 512 prompt and 128 output tokens, with a line of another kind between
LOG = """\
1.42.231.042 I slot launch_slot_: id  8 | task 5082 | processing task, is_child = 0
1.42.231.754 I slot   operator(): id  8 | task 5082 | new prompt, n_ctx_slot = 16384, n_keep = 0, task.n_tokens = 524
1.49.154.710 I slot print_timing: id  8 | task 5082 | n_gen =    100, tg =  15.91 t/s, tg_3s =  16.07 t/s
1.50.763.316 I slot print_timing: id  8 | task 5082 | prompt eval time =     701.76 ms /   524 tokens (    1.34 ms per token,   746.69 tokens per second)
1.50.763.319 I slot print_timing: id  8 | task 5082 |        eval time =    7829.79 ms /   128 tokens (   61.65 ms per token,    16.22 tokens per second)
1.50.763.400 I slot      release: id  8 | task 5082 | stop processing: n_tokens = 652, truncated = 0
1.50.800.000 I slot launch_slot_: id  9 | task 5083 | processing task, is_child = 0
"""


def _log(folder: Path) -> str:
    """A committed run's server log (kept xz-compressed: 3.2 MB of text is 0.16 MB)."""
    return lzma.open(folder / "peer_clients" / "peer_clients.log.xz", "rt").read()


def test_request_timings_reads_llama_servers_own_lines():
    (t,) = engine_logs.request_timings(LOG)  # task 5083 has not finished: left out
    assert t["task"] == 5082 and t["slot"] == 8
    assert t["start_s"] == pytest.approx(60 + 42.231042) and t["end_s"] == pytest.approx(60 + 50.7634)
    assert (t["prompt_ms"], t["prompt_tokens"], t["decode_ms"], t["output_tokens"]) == (701.76, 524, 7829.79, 128)
    assert t["queued_ms"] == pytest.approx(0.712)  # "processing task" to "new prompt": its prompt's first batch
    # the server's ms per token is over n_gen − 1 decode steps (server-common.h n_gen_steps): its own 61.65
    assert t["tpot_ms"] == pytest.approx(7829.79 / 127) and round(t["tpot_ms"], 2) == 61.65


def _task(start, end, prompt_ms, decode_ms, out=65, slot=0):
    return {"slot": slot, "start_s": start, "end_s": end, "queued_ms": 0.0, "prompt_ms": prompt_ms, "decode_ms": decode_ms,
            "output_tokens": out, "tpot_ms": decode_ms / (out - 1)}


def test_figures_and_the_ratio_the_server_accounts_for():
    fast = server_clock.figures([_task(0, 1, 100, 640, slot=0), _task(0, 1, 100, 640, slot=1)])
    slow = server_clock.figures([_task(0, 1.25, 100, 800, slot=0), _task(0, 1.25, 100, 800, slot=2)])
    assert fast["slot_blocks"] == 1 and slow["slot_blocks"] == 2  # slots {0, 1}: one run; {0, 2}: two
    assert fast["tpot_ms"] == 10 and slow["tpot_ms"] == 12.5 and fast["output_throughput"] == 130
    assert server_clock.server_ratio("tpot_ms", fast, slow) == 0.8
    assert server_clock.server_ratio("output_throughput", fast, slow) == pytest.approx(1.25)
    # the lab measured 0.81 of their TPOT; the server ran 0.8 as long a token during the lab's run: accounted for
    why = server_clock.explain("tpot_ms", 0.81, fast, slow, 0.05)
    assert why.startswith(server_clock.SAYS) and "× 0.800" in why and "= 1.012" in why
    assert "formed 1 runs of consecutive ids on average during the lab's run, 2 during theirs" in why
    assert server_clock.explain("tpot_ms", 1.0, fast, slow, 0.05) is None  # the server's factor does not cover 1.0
    assert server_clock.explain("tpot_ms", 0.81, None, slow, 0.05) is None  # no log: no referee


def test_runs_in_a_log_are_split_at_pauses_and_probes_left_out():
    def lines(task, start, end, out):
        f = lambda s: f"0.{int(s):02d}.{int(s * 1000) % 1000:03d}.000"
        return (f"{f(start)} I slot launch_slot_: id  0 | task {task} | processing task, is_child = 0\n"
                f"{f(end)} I slot print_timing: id  0 | task {task} | prompt eval time =  10.00 ms /  5 tokens (x)\n"
                f"{f(end)} I slot print_timing: id  0 | task {task} |        eval time =  90.00 ms / {out:5d} tokens (x)\n"
                f"{f(end)} I slot      release: id  0 | task {task} | stop processing: n_tokens = 9, truncated = 0\n")
    log = lines(1, 1.0, 1.1, 1) + lines(2, 2.0, 3.0, 64) + lines(3, 3.05, 4.0, 64) + lines(4, 9.0, 10.0, 64)
    runs = server_clock.runs_in_log(log)
    assert [[t["task"] for t in r] for r in runs] == [[2, 3], [4]]  # task 1 (one token: a probe) in none


def test_the_h200_record_judged_again_by_the_servers_log():
    """The committed H200 peer check (issue 20): every figure the clients disagreed on beyond ±5 % without a
    definition is accounted for by the server's own log except guidellm's TTFT at 16 streams."""
    record = json.loads((H200 / "peer_clients" / "peer_clients.json").read_text())
    peer_verdicts.rejudge(record, _log(H200))
    kinds = [peer_verdicts.verdict(r) for r in record["ratios"] if r["within ±5 %"] is not None]
    counts = {k: kinds.count(k) for k in ("within", "definition", "server clock", "unexplained")}
    print(counts)
    assert counts == {"within": 17, "definition": 14, "server clock": 9, "unexplained": 2}
    by = {(r["tool"], r["concurrency"], r["metric"]): r for r in record["ratios"]}
    out8 = by[("guidellm", 8, "output_throughput")]
    assert out8["mean"] == 1.142 and "lab ÷ theirs ÷ that = 0.999" in out8["why they differ"]
    assert {k[2] for k, r in by.items() if peer_verdicts.verdict(r) == "unexplained"} == {"ttft_ms mean", "ttft_ms p50"}
    # the referee found each run's requests: 16 (32 at 16 streams) on both sides, 128 tokens each
    for r in record["results"]:
        n = r["lab"]["successes"]
        assert r["server_clock"]["lab"]["requests"] == r["server_clock"]["theirs"]["requests"] == n
        assert r["server_clock"]["lab"]["output_tokens"] == 128 * n


def test_rejudge_refuses_a_log_that_does_not_pair_up():
    record = json.loads((H200 / "peer_clients" / "peer_clients.json").read_text())
    with pytest.raises(ValueError, match="the server log has 0 runs, the record 18 results"):
        peer_verdicts.rejudge(record, "")


def test_busy_host_rows_compare_each_busy_count_with_the_idle_host():
    from lab.experiments import busy_host

    def run(k, tpot, thr):
        return {"busy_cores": k, "output_throughput": thr, "server_clock": {"tpot_ms": tpot}}
    rows = busy_host.by_busy([run(0, 44.0, 150.0), run(2, 55.0, 120.0), run(0, 46.0, 146.0), run(2, 57.0, 118.0)])
    idle, busy = rows
    assert idle["server_tpot_ms"] == {"mean": 45.0, "min": 44.0, "max": 46.0, "n": 2, "÷ idle": 1.0}
    assert busy["server_tpot_ms"]["÷ idle"] == round(56.0 / 45.0, 3) and busy["output_throughput"]["÷ idle"] == round(119 / 148, 3)


def test_slot_blocks_set_the_servers_speed_at_8_streams_on_the_h200():
    """Both H200 peer runs: a request decoded beside 8-10 busy slots ran slower the more runs of consecutive ids those
    slots formed (llama.cpp issue #25840's effect on a hybrid model), by the server's own clock."""
    from lab.measure import slot_placement

    assert slot_placement.blocks([4, 3, 2, 1, 0, 15, 14, 13]) == 2 and slot_placement.blocks([]) == 0
    for folder, expect in ((H200, {1: 39.4, 2: 52.6, 3: 59.8, 4: 70.8}),
                           (H200.parent / "20261202T073617Z_893f270", {1: 39.7, 2: 50.5, 3: 58.3})):
        rows = slot_placement.by_blocks(engine_logs.request_timings(_log(folder)), streams=8)
        print(folder.name, rows)
        assert {r["blocks"]: r["server_tpot_ms"] for r in rows} == expect


def test_busy_cores_beside_the_server_change_nothing_at_equal_placement():
    """The H200 busy-host check: with the slots' placement held equal, 2 or 8 busy cores of 16 moved the server's
    decode by at most 3 %, while the placement alone moved it 37 → 69 ms (the per-run means mix the two)."""
    from lab.experiments import busy_host

    folder = H200.parent / "20261202T073617Z_893f270"
    raw = json.loads((folder / "busy_host" / "busy_host.json").read_text())  # as the run wrote it
    busy_host.attach_requests(raw, lzma.open(folder / "busy_host" / "busy_host.log.xz", "rt").read())
    rows = {(r["busy_cores"], r["blocks"]): r["server_tpot_ms"] for r in busy_host.by_placement(raw["runs"])}
    print(rows)
    assert rows[(0, 3)] == 59.2 and rows[(2, 3)] == 60.7 and rows[(8, 3)] == 61.9
    assert rows[(0, 4)] == 69.0 and rows[(2, 4)] == 68.7 and rows[(8, 4)] == 69.5
    assert rows[(0, 1)] == 36.8
    assert all(abs(rows[(k, b)] / rows[(0, b)] - 1) < 0.05 for k, b in rows if (0, b) in rows)
    assert json.loads((folder / "records" / "busy_host.json").read_text())["by_placement"] == busy_host.by_placement(raw["runs"])


def test_every_named_definition_in_the_h200_records_is_the_tables():
    """What the CPU peer check asserts of its own record (tests/test_peer_clients.py), on both committed H200 records:
    a figure not reported is "not compared", and a verdict "definition" that is no counted per-chunk ITL is EXPLAIN's."""
    for folder in (H200, H200.parent / "20261202T073617Z_893f270"):
        record = json.loads((folder / "records" / "peer_clients.json").read_text())
        for row in record["ratios"]:
            if row["within ±5 %"] is None:
                assert peer_verdicts.verdict(row) == "not compared", row
            elif peer_verdicts.verdict(row) == "definition" and "per stream chunk" not in row["why they differ"]:
                assert row["why they differ"] == peer_verdicts.EXPLAIN[(row["tool"], row["metric"])], row


def test_since_waits_for_the_log_to_catch_up_with_the_client():
    """CI (2026-12-05, load average 7 on 2 cores): the client had every answer before llama-server had written the last
    request's timing lines, `since` found fewer timings than requests and the peer check read None. It reads the log
    again until every request is in it, and says None only after `wait_s`."""
    class Server:
        def __init__(self, texts):
            self.texts = list(texts)

        def log_text(self):
            return self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]

    half = LOG.split("1.50.763.316")[0]  # the request's timing lines not written yet
    late = Server([half, half, LOG])
    assert server_clock.since(late, 0, 1, wait_s=5)["requests"] == 1 and late.texts == [LOG]
    assert server_clock.since(Server([half]), 0, 1, wait_s=0.3) is None
    assert server_clock.since(Server([LOG]), None, 1) is None  # no log to read: at once
