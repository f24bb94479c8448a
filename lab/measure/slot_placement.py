"""Which llama-server slots each round of a `lab tune --levels` point landed in, beside that round's speed (pure).

llama-server logs every request's slot at info level (-lv 3 and above): "slot launch_slot_: id  9 | task 57 |
processing task" (tools/server/server-context.cpp). A tune point sends its requests in a fixed order — the server's
one-token smoke request, then per level the warm-up rounds and the repetitions, each a closed batch of N requests
(lab.measure.tune.Method.plan, lab.measure.loadgen.sweep) — so the n-th logged launch is the n-th request, and each
round's set of slots can be set beside its output tok/s and TPOT. On the H200 (2026-12-02) this separated the two
speeds of 8 streams on 16 slots: llama.cpp issue #25840 reports hybrid decode slower when the busy slots are not
contiguous.

    rows = slot_placement.rounds(point, server_log_text, level=8)
"""
from __future__ import annotations

import re

from lab.core import fields

LAUNCH = re.compile(r"slot launch_slot_: id +(\d+) \| task \d+ \| processing task")
SMOKE_REQUESTS = 1  # lab.serving.serve.wait_until_healthy sends one 1-token completion before the load


def launched(log_text: str) -> list[int]:
    """The slot id of every request the server started, in order."""
    return [int(m) for m in LAUNCH.findall(log_text)]


def contiguous(slots: list[int]) -> bool:
    """Whether the slots form one run of consecutive ids."""
    s = sorted(slots)
    return bool(s) and s == list(range(s[0], s[0] + len(s)))


def rounds(point: dict, log_text: str, level: int) -> list[dict]:
    """Per round of `level` (its warm-up rounds, then its repetitions): the slots it used, whether they were one run
    of consecutive ids, its output tok/s and (repetitions) TPOT p50. `point` is a tune point measured with --levels
    (its `levels` in order of measurement). Empty when the log does not hold every launch (a log cut short)."""
    ids, start = launched(log_text), SMOKE_REQUESTS
    levels = sorted(point.get("levels") or {}, key=int)
    for n in levels:
        lv = point["levels"][n]
        reps = (lv.get("spread") or {}).get("output_throughput") or {}
        warm = (lv.get("warmup") or {}).get("rounds") or []
        sizes = [r["requests"] for r in warm] + [int(n)] * len(reps.get("values") or [])
        if int(n) != level:
            start += sum(sizes)
            continue
        tpots = [None] * len(warm) + list(((lv.get("spread") or {}).get("tpot_p50_ms") or {}).get("values") or [])
        speeds = [fields.canonical(r)["output_throughput"] for r in warm] + list(reps.get("values") or [])
        if start + sum(sizes) > len(ids):
            return []
        out = []
        for k, (size, speed, tpot) in enumerate(zip(sizes, speeds, tpots)):
            slots = sorted(ids[start:start + size])
            start += size
            out.append({"round": k + 1, "kind": "warm-up" if k < len(warm) else "repetition", "slots": slots,
                        "contiguous": contiguous(slots), "output_throughput": speed, "tpot_p50_ms": tpot})
        return out
    return []


__all__ = ["LAUNCH", "launched", "contiguous", "rounds"]
