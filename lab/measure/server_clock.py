"""The server's own clock as referee between two clients measured one after the other.

A peer client and the lab's client cannot measure the same requests; they run back to back on one server, and a
server does not always run at one speed (on the lent H200 the same 8-stream load decoded at 42-66 ms a token from
one run to the next, 2026-12-02). What llama-server logs for each request it finished (lab.serving.engine_logs.
request_timings: prompt ms, decode ms per token, start and end) times each client's run on the server's clock, so

    lab ÷ theirs  =  (the server's figure during the lab's run ÷ during theirs)  ×  what is left

and what is left is the clients' own difference. `figures` sums a run's requests up; `server_ratio` is the first
factor for a compared metric; `explain` says when what is left is within the tolerance.
"""
from __future__ import annotations

import time
from statistics import mean

from lab.measure import slot_placement
from lab.serving import engine_logs

# The server's figure that moves as a client's metric does when the server runs faster or slower.
# TTFT's is the slot's first token: its prompt's wait for room in a batch, then the prompt (the prompt time alone
# missed ~0.55 s a request at 16 streams of 512-token prompts on the H200: lab.measure.wire_clock showed it, 2026-12-02).
COUNTERPART = {"ttft_ms": "first_token_ms", "tpot_ms": "tpot_ms", "itl_ms": "tpot_ms", "e2el_ms": "e2el_ms",
               "output_throughput": "output_throughput", "request_throughput": "request_throughput"}
# How every reason this module gives starts (peer_clients counts these apart from the named definitions).
SAYS = "the server's own log accounts for it"
# Figures where more is faster (a ratio of these runs the other way round from a latency's).
PER_SECOND = {"output_throughput", "request_throughput"}


def mark(server) -> int | None:
    """Where the server's log ends now (None: no log to read, e.g. an endpoint the lab did not start)."""
    read = getattr(server, "log_text", None)
    return len(read()) if read else None


def since(server, start: int | None, requests: int, wait_s: float = 10.0) -> dict | None:
    """The server's figures for the last `requests` requests it finished after `start` (a run's warm-ups and a
    client's probes come first, so the measured ones are the last); None without a log or without them. The client
    has its last answer before the server has written that request's timing lines: on a loaded 2-core machine the log
    lagged the client (a CI clone, 2026-12-05, load average 7: fewer timings than requests), so the log is read again
    for up to `wait_s` until every request is in it."""
    if start is None or requests <= 0:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        tasks = engine_logs.request_timings(server.log_text()[start:])
        if len(tasks) >= requests:
            return figures(tasks[-requests:])
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def runs_in_log(text: str, gap_s: float = 0.2, min_tokens: int = 2) -> list[list[dict]]:
    """The requests of a log grouped into runs, for a record made before runs were marked: a run's requests overlap
    or follow each other within milliseconds, the next client starts after seconds (its process starts), so a pause
    of more than `gap_s` with nothing running ends a run. Requests of fewer than `min_tokens` output tokens (health
    probes, a client's check that the endpoint answers) belong to no run."""
    runs: list[list[dict]] = []
    end = None
    for t in engine_logs.request_timings(text):
        if t["output_tokens"] < min_tokens:
            continue
        if end is None or t["start_s"] - end > gap_s:
            runs.append([])
        runs[-1].append(t)
        end = t["end_s"] if end is None else max(end, t["end_s"])
    return runs


def figures(tasks: list[dict]) -> dict | None:
    """One run on the server's clock: requests, mean prompt ms, queued ms (waiting for room in a batch) and first
    token ms (the two), decode ms per token (TPOT), queued + prompt + decode ms, output tokens, the span from the first
    start to the last end, and output tokens and requests per second of it."""
    if not tasks:
        return None
    span = max(t["end_s"] for t in tasks) - min(t["start_s"] for t in tasks)
    tpots = [t["tpot_ms"] for t in tasks if t["tpot_ms"] is not None]
    out = sum(t["output_tokens"] for t in tasks)
    blocks = [slot_placement.blocks(slot_placement.busy_slots(t, tasks)) for t in tasks]
    return {"requests": len(tasks), "slot_blocks": round(mean(blocks), 2),
            "prompt_ms": mean(t["prompt_ms"] for t in tasks), "queued_ms": mean(t["queued_ms"] for t in tasks),
            "first_token_ms": mean(t["queued_ms"] + t["prompt_ms"] for t in tasks),
            "tpot_ms": mean(tpots) if tpots else None,
            "e2el_ms": mean(t["queued_ms"] + t["prompt_ms"] + t["decode_ms"] for t in tasks), "output_tokens": out,
            "span_s": span, "output_throughput": out / span if span > 0 else None,
            "request_throughput": len(tasks) / span if span > 0 else None}


def server_ratio(key: str, lab: dict | None, theirs: dict | None) -> float | None:
    """The server's figure for `key` during the lab's run ÷ during theirs (None when either is unknown)."""
    name = COUNTERPART.get(key)
    a, b = (lab or {}).get(name), (theirs or {}).get(name)
    return a / b if name and a and b else None


def explain(key: str, ratio: float | None, lab: dict | None, theirs: dict | None, tolerance: float,
            per_chunk: float = 1.0) -> str | None:
    """Why lab ÷ theirs (`ratio`) left 1 ± tolerance when the server's own clock accounts for it: the text, or None.
    `per_chunk` divides out the lab's ITL being per stream chunk (lab.experiments.peer_verdicts.itl_per_chunk)."""
    srv = server_ratio(key, lab, theirs)
    if ratio is None or srv is None:
        return None
    left = ratio / srv / per_chunk
    if abs(left - 1) > tolerance:
        return None
    name = COUNTERPART[key]
    unit = "/s" if name in PER_SECOND else " ms"
    where = ""
    if lab.get("slot_blocks") and theirs.get("slot_blocks") and lab["slot_blocks"] != theirs["slot_blocks"]:
        where = (f"; the busy slots formed {lab['slot_blocks']:.2g} runs of consecutive ids on average during the "
                 f"lab's run, {theirs['slot_blocks']:.2g} during theirs")
    return (f"{SAYS}: {name} {lab[name]:.4g}{unit} during the lab's run, "
            f"{theirs[name]:.4g}{unit} during theirs (× {srv:.3f}){where}; lab ÷ theirs ÷ that"
            f"{' ÷ tokens per chunk' if per_chunk != 1.0 else ''} = {left:.3f}")
