"""lab.measure.slot_placement: requests matched to the slots llama-server logged, round by round (pure)."""
from lab.measure import slot_placement


def _log(ids):
    return "\n".join(f"0.03.855.866 I slot launch_slot_: id {i:2d} | task {k} | processing task, is_child = 0"
                     for k, i in enumerate(ids))


def test_rounds_follow_the_order_of_the_load():
    # smoke request, level 1: 1 warm-up + 2 repetitions, level 2: 1 warm-up round + 2 repetitions of 2 requests
    ids = [15, 14, 13, 12, 1, 2, 0, 3, 2, 1]
    # level 2's warm-up round as records before the field schema wrote it (output_tok_s): read as output_throughput
    point = {"levels": {"1": {"warmup": {"rounds": [{"requests": 1, "output_throughput": 70.0}]},
                              "spread": {"output_throughput": {"values": [72.0, 73.0]}, "tpot_p50_ms": {"values": [12.1, 12.0]}}},
                        "2": {"warmup": {"rounds": [{"requests": 2, "output_tok_s": 100.0}]},
                              "spread": {"output_throughput": {"values": [90.0, 130.0]}, "tpot_p50_ms": {"values": [20.5, 15.0]}}}}}
    rows = slot_placement.rounds(point, _log(ids), level=2)
    assert [(r["kind"], r["slots"], r["contiguous"], r["output_throughput"], r["tpot_p50_ms"]) for r in rows] == [
        ("warm-up", [1, 2], True, 100.0, None), ("repetition", [0, 3], False, 90.0, 20.5),
        ("repetition", [1, 2], True, 130.0, 15.0)]
    assert slot_placement.rounds(point, _log(ids[:-1]), level=2) == []  # a log cut short matches nothing
    assert slot_placement.launched("slot launch_slot_: id  9 | task -1 | sampler chain: logits") == []
    assert slot_placement.contiguous([9, 0, 15, 14, 13, 12, 11, 10]) is False and slot_placement.contiguous([3, 2, 4])


def test_waves_on_split_slots_rebuilt_the_graph_at_every_step_on_the_h100():
    """The committed H100 suite run's server log (outputs/h100-x1/20261207T163707Z_add993cf, notebook 06 with -bs):
    every measured wave of 4 and 8 streams on one block of slots reused the compute graph at ~all its 256 steps, every
    wave on two blocks at none, and decoded 1.5-1.8x slower a token (llama-server's own timing)."""
    from pathlib import Path

    from lab.serving import engine_logs

    log = Path(__file__).resolve().parents[2] / "outputs/h100-x1/20261207T163707Z_add993cf/logs/06_bench_server.log"
    waves = slot_placement.waves(engine_logs.request_timings(log.read_text()))
    measured = [(w["requests"], w["blocks"], w["graphs_reused"], w["server_tpot_ms_min"], w["server_tpot_ms_max"])
                for w in waves if w["steps"] == 256 and w["requests"] in (4, 8)]
    assert measured == [(4, 1, 254, 19.3, 21.8), (4, 1, 254, 19.6, 22.0), (4, 2, 0, 34.1, 36.4), (4, 1, 252, 19.8, 21.4),
                        (4, 1, 252, 19.6, 21.2), (8, 1, 253, 29.8, 35.3), (8, 2, 0, 45.0, 47.9), (8, 1, 252, 29.9, 33.8)]
    split = next(w for w in waves if w["steps"] == 256 and w["blocks"] == 2 and w["requests"] == 4)
    assert split["slots"] == [0, 1, 2, 15]
    assert [w["graphs_reused"] for w in waves if w["requests"] == 16 and w["steps"] == 256] == [253, 254, 253]
