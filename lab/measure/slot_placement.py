"""Which llama-server slots each round of a `lab tune --levels` point landed in, beside that round's speed (pure).

llama-server logs every request's slot at info level (-lv 3 and above): "slot launch_slot_: id  9 | task 57 |
processing task" (tools/server/server-context.cpp). A tune point sends its requests in a fixed order — the server's
one-token smoke request, then per level the warm-up rounds and the repetitions, each a closed batch of N requests
(lab.experiments.tune.Method.plan, lab.measure.load_levels.sweep) — so the n-th logged launch is the n-th request, and each
round's set of slots can be set beside its output tok/s and TPOT. On the H200 (2026-12-02) this separated the two
speeds of 8 streams on 16 slots: llama.cpp issue #25840 reports hybrid decode slower when the busy slots are not
contiguous.

    rows = slot_placement.rounds(point, server_log_text, level=8)
    slot_placement.by_blocks(engine_logs.request_timings(server_log_text), streams=8)

`by_blocks` reads any llama-server log, whoever sent the load: for each finished request, the slots busy while it
decoded, how many runs of consecutive ids they form ("blocks"), and the server's own decode ms a token for it. On
the H200 (2026-12-02, three servers, the lab's client, llama-benchy and guidellm) 8 streams decoded at 37-40 ms a
token in one block, 49-53 in two, 58-61 in three, 69-71 in four — the server's speed between two runs of one load.
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


def blocks(slots: list[int]) -> int:
    """How many runs of consecutive ids the slots form (1: contiguous; 0: none)."""
    s = sorted(set(slots))
    return (1 + sum(1 for a, b in zip(s, s[1:]) if b != a + 1)) if s else 0


def busy_slots(t: dict, tasks: list[dict]) -> list[int]:
    """The slots of `tasks` busy while request `t` decoded (itself included)."""
    decode_start = t["start_s"] + (t.get("queued_ms", 0.0) + t["prompt_ms"]) / 1000
    return [u["slot"] for u in tasks if u["start_s"] < t["end_s"] and u["end_s"] > decode_start]


def by_blocks(tasks: list[dict], streams: int, min_tokens: int = 16) -> list[dict]:
    """Requests of a log (lab.serving.engine_logs.request_timings) decoded beside about `streams` busy slots
    (streams to streams + 2, counting itself), grouped by the blocks those slots formed: per block count, the
    requests and the server's decode ms a token, mean [min-max]. Requests under `min_tokens` output tokens (probes,
    health checks) neither count nor occupy."""
    done = [t for t in tasks if t["output_tokens"] >= min_tokens and t["tpot_ms"] is not None]
    groups: dict[int, list[float]] = {}
    for t in done:
        busy = busy_slots(t, done)
        if streams <= len(busy) <= streams + 2:
            groups.setdefault(blocks(busy), []).append(t["tpot_ms"])
    return [{"blocks": k, "requests": len(v), "server_tpot_ms": round(sum(v) / len(v), 1),
             "min": round(min(v), 1), "max": round(max(v), 1)} for k, v in sorted(groups.items())]


def waves(tasks: list[dict], min_tokens: int = 16) -> list[dict]:
    """Requests of a log (lab.serving.engine_logs.request_timings) grouped into waves of overlapping requests, as a
    closed loop of N sends them when each repetition is one batch: per wave its slots, their blocks, the server's decode
    ms a token (min and max over its requests), its decode steps (the most output tokens) and how many of them reused
    the compute graph (the log's graphs-reused count at the wave's end minus at the previous wave's; None where the
    log has no such count). On the H100 (2026-12-07) every wave on split slots reused none: the graph was rebuilt at
    each step. Requests under `min_tokens` output tokens (probes, health checks) are left out."""
    done = sorted((t for t in tasks if t["output_tokens"] >= min_tokens and t["tpot_ms"] is not None),
                  key=lambda t: t["start_s"])
    groups: list[list[dict]] = []
    for t in done:
        if groups and t["start_s"] < max(u["end_s"] for u in groups[-1]):
            groups[-1].append(t)
        else:
            groups.append([t])
    out, before = [], None
    for g in groups:
        counts = [t["graphs_reused"] for t in g if t.get("graphs_reused") is not None]
        after = max(counts) if counts else None
        slots = sorted(t["slot"] for t in g)
        out.append({"requests": len(g), "slots": slots, "blocks": blocks(slots), "steps": max(t["output_tokens"] for t in g),
                    "graphs_reused": after - before if after is not None and before is not None else None,
                    "server_tpot_ms_min": round(min(t["tpot_ms"] for t in g), 1),
                    "server_tpot_ms_max": round(max(t["tpot_ms"] for t in g), 1)})
        before = after if after is not None else before
    return out


__all__ = ["LAUNCH", "launched", "contiguous", "rounds", "blocks", "busy_slots", "by_blocks", "waves"]
