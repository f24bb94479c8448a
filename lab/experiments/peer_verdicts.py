"""The peer check's verdicts (lab.experiments.peer_clients runs the clients): metric by metric, lab ÷ theirs, within the
tolerance or why not — a definition named from the tool's code (EXPLAIN), the lab's ITL being per stream chunk
(counted from the run), or the server's own clock (lab.measure.server_clock: what llama-server logged for each
run) — and the spread over repetitions; `rejudge` applies them again to a record with its server's log."""
from __future__ import annotations

from lab.core import display
from lab.measure import metrics, server_clock, wire_clock

TOLERANCE = 0.05  # the target: lab ÷ theirs within 5 %
RATIO = "lab_over_theirs"  # the ratios' field (lab/data/fields.yaml): 3 decimals, for the ±TOLERANCE judgement

# Why a ratio may leave 1 ± TOLERANCE although both clients measure right: per (tool, metric), from the sources above.
EXPLAIN = {
    ("aiperf", "e2el_ms mean"): "aiperf ends request latency at the last response it parsed; the lab at [DONE] "
                                "(after the usage chunk): the lab's is longer by that tail",
    ("llama-benchy", "tpot_ms mean"): "llama-benchy's decode window ends at the last content chunk; the lab's "
                                      "TPOT window at the end of the stream ([DONE]): the lab's is longer by that tail "
                                      "÷ (output tokens − 1)",
    ("llama-benchy", "tpot_ms p50"): "as TPOT mean",
    ("llama-benchy", "ttft_ms mean"): "not the same prompt: llama-benchy's --pp counts the whole templated prompt "
                                      "(runner.py:111-113, adapt_prompt: pp − the chat template's tokens), the lab's "
                                      "input tokens the user text, so on chat its prompt is the template longer "
                                      "(158 vs 128 tokens here: TTFT ×1.23 at one stream, as measured); at more streams "
                                      "its batches also start together (prefills queue), the lab's refill",
    ("llama-benchy", "ttft_ms p50"): "as TTFT mean",
    ("llama-benchy", "output_throughput"): "not the same quantity: llama-benchy's total t/s is decode tokens ÷ (last "
                                           "− first token of a batch), leaving out prefill and the gap between "
                                           "batches; at 1 stream it is the per-request decode rate",
    ("guidellm", "tpot_ms mean"): "guidellm's ITL (compared here) ends at the last token chunk "
                                  "(request_stats.py:354); the lab's TPOT window at the end of the stream ([DONE]): "
                                  "the lab's is longer by that tail ÷ (output tokens − 1)",
    ("guidellm", "tpot_ms p50"): "as TPOT mean",
}
# Metrics each tool reports, in the lab's names (lab.measure.metrics.summarise): (key, statistic).
COMPARED = [("ttft_ms", "mean"), ("ttft_ms", "p50"), ("tpot_ms", "mean"), ("tpot_ms", "p50"), ("itl_ms", "mean"),
            ("itl_ms", "p50"), ("e2el_ms", "mean"), ("output_throughput", None), ("request_throughput", None)]


def _get(d: dict, key: str, sub: str | None):
    v = d.get(key)
    return v.get(sub) if sub and isinstance(v, dict) else v


def compare(tool: str, ours: dict, theirs: dict, clock: dict | None = None, wire: dict | None = None) -> list[dict]:
    """Metric by metric: lab, theirs, lab ÷ theirs, within TOLERANCE, and the reason where they differ — a definition
    (EXPLAIN, the ITL per chunk), or the server's own clock (`clock`: lab.measure.server_clock figures of each run,
    {"lab": ..., "theirs": ...}) showing the server ran at another speed during one of the two runs, or the wire's
    (`wire`: lab.measure.wire_clock figures of each run, when the clients went through its proxy) showing the server
    delivered the first tokens later in one run (TTFT and request latency, medians included)."""
    clock, wire = clock or {}, wire or {}
    rows = []
    for key, sub in COMPARED:
        name = f"{key} {sub}" if sub else key
        a, b = _get(ours, key, sub), _get(theirs, key, sub)
        ratio = metrics.ratio(a, b)
        within = ratio is not None and abs(ratio - 1) <= TOLERANCE
        why = EXPLAIN.get((tool, name))
        if b is None:
            why = f"{tool} does not report it"
        elif key == "itl_ms" and sub == "mean" and not within:
            why = itl_per_chunk(ours, ratio) or server_clock.explain(
                key, ratio, clock.get("lab"), clock.get("theirs"), TOLERANCE, per_chunk=_tokens_per_chunk(ours) or 1.0)
        elif not within and sub != "p50":
            # measured beats named: when the server's own clock accounts for the ratio, that is the reason (a named
            # definition cannot say by how much, nor in which direction); the definition stays the fallback
            why = server_clock.explain(key, ratio, clock.get("lab"), clock.get("theirs"), TOLERANCE) or why
        if not within and b is not None and (why is None or sub == "p50"):
            # the wire keeps every request: it referees a median too (the server log's per-run means cannot)
            why = wire_clock.explain(key, sub, ratio, wire.get("lab"), wire.get("theirs"), TOLERANCE) or why
        srv = server_clock.server_ratio(key, clock.get("lab"), clock.get("theirs"))
        on_wire = wire_clock.wire_ratio(key, sub, wire.get("lab"), wire.get("theirs"))
        rows.append({"tool": tool, "metric": name, "lab": display.rounded(a, key), "theirs": display.rounded(b, key),
                     "lab ÷ theirs": display.rounded(ratio, RATIO), "within ±5 %": within if b is not None else None,
                     "server: lab run ÷ theirs": display.rounded(srv, RATIO),
                     **({"wire: lab run ÷ theirs": display.rounded(on_wire, RATIO)} if wire else {}),
                     "why they differ": None if within else why})
    return rows


def _tokens_per_chunk(ours: dict) -> float | None:
    """Output tokens per stream-chunk gap in the lab's run (a chunk can carry several tokens: itl_per_chunk)."""
    gaps = (ours.get("itl_ms") or {}).get("n")
    tokens = ours.get("successes", 0) * ((ours.get("output_tokens_mean") or 1) - 1)
    return tokens / gaps if gaps and tokens else None


def itl_per_chunk(ours: dict, ratio: float | None) -> str | None:
    """The definition behind an ITL ratio, checked against the run's own counts: the lab's ITL is the gap between
    stream chunks (lab.measure.metrics, vLLM bench serve's definition); the peers' is per token (llama-benchy: its
    TPOT; guidellm request_stats.py:354: decode time ÷ (tokens − 1)). llama-server holds back a token that ends
    inside a UTF-8 character and sends it with the next, so a chunk can carry several tokens (random weights do
    that often). Explained when lab ÷ theirs ÷ (tokens per chunk gap) is within TOLERANCE; None otherwise."""
    per_chunk = _tokens_per_chunk(ours)
    if not per_chunk or ratio is None:
        return None
    if abs(ratio / per_chunk - 1) > TOLERANCE:
        return None
    gaps = ours["itl_ms"]["n"]
    tokens = ours["successes"] * (ours["output_tokens_mean"] - 1)
    return (f"the lab's ITL is per stream chunk, theirs per token: a chunk carried {per_chunk:.2f} tokens here "
            f"({tokens:.0f} tokens in {gaps} gaps; llama-server sends a token ending inside a UTF-8 character with "
            f"the next), and lab ÷ theirs ÷ that = {ratio / per_chunk:.3f}")


def rejudge(record: dict, server_log: str) -> dict:
    """A record made before each run was marked in the server's log, judged again with the server's clock: the log's
    runs (server_clock.runs_in_log) are the record's results in order, theirs then the lab's, two per result; each
    result gets its server_clock and its rows again, and the record its ratios. Raises ValueError when the log's runs
    do not pair up with the results (another log, or runs cut)."""
    runs = server_clock.runs_in_log(server_log)
    results = record["results"]
    if len(runs) != 2 * len(results):
        raise ValueError(f"the server log has {len(runs)} runs, the record {len(results)} results (2 runs each): "
                         "not this record's log, or a run was cut")
    for i, r in enumerate(results):
        n = r["lab"]["successes"]
        theirs, ours = runs[2 * i], runs[2 * i + 1]
        r["server_clock"] = {"theirs": server_clock.figures(theirs[-n:]), "lab": server_clock.figures(ours[-n:])}
        r["rows"] = compare(r["tool"], r["lab"], r["theirs"], r["server_clock"], r.get("wire_clock")) if r["theirs"] else []
    record["ratios"] = ratio_spread(record)
    return record


def ratio_spread(record: dict) -> list[dict]:
    """Per tool, level and metric: lab ÷ theirs over the repetitions — mean, min, max, the samples — and the verdict
    of the mean (within TOLERANCE, or the definition that explains it)."""
    by: dict[tuple, list] = {}
    for r in record["results"]:
        for row in r["rows"]:
            by.setdefault((row["tool"], r["concurrency"], row["metric"]), []).append(row)
    out = []
    for (tool, c, metric), rows_ in by.items():
        xs = [x["lab ÷ theirs"] for x in rows_ if x["lab ÷ theirs"] is not None]
        mean = sum(xs) / len(xs) if xs else None
        within = None if mean is None else abs(mean - 1) <= TOLERANCE
        srv = [x.get("server: lab run ÷ theirs") for x in rows_]
        srv_mean = sum(srv) / len(srv) if srv and None not in srv else None
        on_wire = [x.get("wire: lab run ÷ theirs") for x in rows_]
        wire_mean = sum(on_wire) / len(on_wire) if on_wire and None not in on_wire else None
        if mean is not None and srv_mean and not metric.endswith("p50") and not metric.startswith("itl_ms") \
                and abs(mean / srv_mean - 1) <= TOLERANCE:
            named = EXPLAIN.get((tool, metric))
            why = (f"{server_clock.SAYS}: over the repetitions its figure during the lab's runs ÷ "
                   f"during theirs was {srv_mean:.3f} on average ({', '.join(f'{v:.3f}' for v in srv)}); lab ÷ theirs ÷ "
                   f"that = {mean / srv_mean:.3f}" + (f" (the definition behind it: {named})" if named else ""))
        elif mean is not None and wire_mean and abs(mean / wire_mean - 1) <= TOLERANCE:
            why = (f"{wire_clock.SAYS}: over the repetitions its figure during the lab's runs ÷ during theirs was "
                   f"{wire_mean:.3f} on average ({', '.join(f'{v:.3f}' for v in on_wire)}); lab ÷ theirs ÷ that = "
                   f"{mean / wire_mean:.3f}")
        else:
            why = (rows_[0]["why they differ"] if not xs else EXPLAIN.get((tool, metric))
                   or next((x["why they differ"] for x in rows_ if x["why they differ"]), None)
                   if all(x["why they differ"] or x["within ±5 %"] for x in rows_) else None)
        out.append({"tool": tool, "concurrency": c, "metric": metric, "samples": xs,
                    "mean": display.rounded(mean, RATIO), "min": min(xs) if xs else None, "max": max(xs) if xs else None,
                    "within ±5 %": within, "why they differ": None if within else why})
    return out


def verdict(row: dict) -> str:
    """A compared figure's verdict: "within" (±TOLERANCE), "definition" (a named or counted definition explains
    it), "server clock" (the server's own log accounts for it: lab.measure.server_clock), "wire clock" (the proxy
    between clients and server does: lab.measure.wire_clock), "unexplained", or "not compared" (the tool does not
    report the figure)."""
    why = row["why they differ"]
    if row["within ±5 %"] is None:
        return "not compared"  # the tool does not report it
    if row["within ±5 %"]:
        return "within"
    if not why:
        return "unexplained"
    if why.startswith(wire_clock.SAYS):
        return "wire clock"
    return "server clock" if why.startswith(server_clock.SAYS) else "definition"
