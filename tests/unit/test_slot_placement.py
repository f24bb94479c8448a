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
