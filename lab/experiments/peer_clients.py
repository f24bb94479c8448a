"""Peer check of the lab's client against benchmark clients from PyPI: llama-benchy, guidellm and aiperf (and the
`vllm bench serve` check of lab.measure.peer_bench, whose load and lab-client run this reuses), on one llama-server.

    record = peer_clients.run_on_smollm2(run_dir)   # into run_dir/peer_clients/; starts a CPU llama-server (embedded SmolLM2), runs, stops it
    peer_verdicts.ratio_spread(record)              # per tool, level, metric: lab ÷ theirs over repetitions, agrees or why not
    python -m lab.experiments.peer_clients --profile P --run-dir D --levels 1,8,16 --repetitions 3   # any profile's server

Same load per level (lab.measure.peer_bench.PeerLoad): N requests, ≈ I prompt tokens, exactly O output tokens
(ignore_eos, temperature 0), at most C in flight, one warm-up first; the clients run one after the other on the
same server, and the lab's client runs again right after each peer (the same endpoint it used: aiperf and guidellm on
/v1/completions, llama-benchy on /v1/chat/completions, its only endpoint), so a drift of the shared CPU between
the two runs stays small. The clients live in .venv-peers (lab/setup/peers.py), never in the lab's venv (on the H200:
wheels in a folder of their own, lab/device/run_h200.sh MODE=peers).

Definitions, as each tool's own code states them (read in the pinned wheels):
* aiperf 0.13.0 (aiperf/metrics/types/): TTFT = first *content* response − request start (ttft_metric.py), the
  lab's definition; its "ITL" is (request latency − TTFT) ÷ (output tokens − 1) (inter_token_latency_metric.py),
  i.e. the lab's TPOT; its "ICL" (inter_chunk_latency_metric.py) is the lab's ITL, gaps between content chunks;
  throughputs = count ÷ (last response − first request start) (benchmark_duration_metric.py, as the lab's run).
  Request latency ends at the *final response* it parsed; the lab's at the end of the stream ([DONE]).
* llama-benchy 0.4.0 (llama_benchy/client.py, results.py): e2e_ttft = first chunk with content − start (the
  lab's TTFT; its `ttfr` is vLLM's first-`choices` TTFT); tg t/s per request = tokens after the first content
  chunk ÷ (last − first content chunk), tokens from usage spread evenly over the chunks: 1000 ÷ that is the lab's
  TPOT without the end of the stream (usage chunk, [DONE]). Its total t/s (concurrency > 1) is decode-only over
  a batch (last token − first token of the batch), not output tokens ÷ run time, and it reports no request
  throughput; requests go in batches of C that start together (a run), the lab's client refills as each ends.
* guidellm 0.8.0 (guidellm/backends/openai/http.py, schemas/base/request_stats.py): TTFT = first chunk carrying
  tokens − request start (http.py:344/371, request_stats.py:273), the lab's; its "ITL" is (last − first token chunk)
  ÷ (output tokens − 1) (request_stats.py:354), token-weighted in its mean: the lab's per-chunk ITL mean when a chunk
  is a token (llama-server streams one token a chunk), and the lab's TPOT without the end of the stream; its "TPOT"
  is (last token − request start) ÷ output tokens, first token included (request_stats.py:333, not the lab's);
  request latency ends after [DONE] (http.py:387), as the lab's; throughputs = count ÷ (last request end − first
  request start) of the benchmark, as the lab's run duration (its mean of requests_per_second equals that).

The clients run back to back, not at once, and the server's speed can move between the two runs: each run is also
timed on the server's own clock (its log, lab.measure.server_clock), and a ratio the server's speed accounts for is
said to be so ("the server ran at another speed"), with the figures. The timing ratios are recorded, never asserted;
what a run must get exactly right — requests done, output tokens — is (tests/tools/test_peer_clients_tools.py).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from lab.core import evidence
from lab.core.checks import Check
from lab.measure import metrics, server_clock, wire_clock
from lab.experiments.peer_verdicts import TOLERANCE, compare, ratio_spread, verdict
from lab.measure.peer_bench import PeerLoad, run_lab_client
from lab.measure.peer_tools import (MODULES, aiperf_command, benchy_command, benchy_errors, guidellm_command,
                                    guidellm_scenario, parse_aiperf, parse_benchy, parse_guidellm, peers_info, run_tool,
                                    seed_benchy_book, skip_reason, slim_guidellm, tokenizer_path)

# The tools `make test` runs: the two that ran reliably on the 2-core CI machine (aiperf 0.13's timing manager kept
# a core busy and its requests stalled there, 2026-12-01); aiperf stays available (tools=(..., "aiperf")).
DEFAULT_TOOLS = ("llama-benchy", "guidellm")
# The peer check's llama-server runs with one thread: on the loaded 2-core machine (another test's vLLM server and a
# busy loop beside it) -t 2 decoded 1 tok/s (its threads' spin barrier starved), -t 1 32 tok/s (2026-12-02 04:16).
# The check compares clients on one server, so the server's speed only has to stay put between them.
SERVER_THREADS = 1
# 2 levels × 16 requests × 64 tokens: ~1-2 s of decode per level on 2 cores with the 135M model, enough chunks
# (≈ 1000 per level) that per-chunk means are stable; TTFT of a 128-token prompt is ~15-40 ms here.
LEVELS = (1, 2)
LOAD = PeerLoad(num_prompts=16, concurrency=1, input_tokens=128, output_tokens=64)
SOURCES = {"aiperf": "aiperf 0.13.0 aiperf/metrics/types/{ttft,inter_token_latency,inter_chunk_latency,"
                     "output_token_throughput,benchmark_duration}_metric(s).py",
           "llama-benchy": "llama-benchy 0.4.0 llama_benchy/client.py run_generation, results.py _process_batch",
           "guidellm": "guidellm 0.8.0 guidellm/backends/openai/http.py:344-387, schemas/base/request_stats.py:264-354"}


def lab_metrics(summary: dict) -> dict:
    """The lab's summary (lab.measure.metrics.summarise) reduced to the compared metrics."""
    return {k: summary[k] for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput",
                                    "request_throughput", "successes", "prompt_tokens_mean", "output_tokens_mean")}


# ---------------------------------------------------------------- orchestrate
class Via:
    """`server` as the clients see it through the wire clock's proxy: its base_url is the proxy's; everything else
    (the command, the key, the log the server clock reads) is the server's."""

    def __init__(self, server, wire: wire_clock.Wire):
        self._server, self.base_url = server, wire.base_url

    def __getattr__(self, name):
        return getattr(self._server, name)


def _one_level(tool: str, server, load: PeerLoad, tokenizer: str, out_dir: Path,
               wire: wire_clock.Wire | None = None) -> dict:
    model = server.command.served_model or "default"
    direct, server = server, (Via(server, wire) if wire else server)
    their_wire = wire.mark() if wire else None
    level_dir = out_dir / f"{tool}-c{load.concurrency}"
    level_dir.mkdir(parents=True, exist_ok=True)
    their_mark = server_clock.mark(server)
    if tool == "aiperf":
        argv = aiperf_command(server.base_url, model, tokenizer, load, level_dir / "artifacts")
        # No HF_HUB_OFFLINE for aiperf: with it set (any value), aiperf 0.13.0 looks a local tokenizer folder up as a
        # hub snapshot and fails (aiperf/common/tokenizer.py _from_pretrained_local: HFValidationError, seen here);
        # without it, an absolute path is taken as local (resolve_alias) and never reaches the hub.
        ran = run_tool(argv, level_dir / "aiperf.log", api_key=server.api_key)
        export = next((level_dir / "artifacts").rglob("profile_export_aiperf.json"), None) if not ran["error"] else None
        raw = json.loads(export.read_text()) if export else None
        theirs = parse_aiperf(raw) if raw else None
        endpoint = "completions"
    elif tool == "guidellm":
        result, scenario = level_dir / "benchmarks.json", level_dir / "scenario.json"
        result.unlink(missing_ok=True)
        spec = guidellm_scenario(server.base_url, model, tokenizer, load, result, server.api_key)
        evidence.write_whole(scenario, json.dumps(spec, indent=1))
        try:
            ran = run_tool(guidellm_command(scenario), level_dir / "guidellm.log",
                           env={"HOME": str(level_dir), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        finally:  # the server's key stays out of the run folder
            spec["spec"]["backend"].pop("api_key", None)
            evidence.write_whole(scenario, json.dumps(spec, indent=1))
        raw = json.loads(result.read_text()) if result.exists() and not ran["error"] else None
        raw = slim_guidellm(raw) if raw else None
        theirs = parse_guidellm(raw) if raw else None
        endpoint = "completions"
    elif tool == "llama-benchy":
        home = level_dir / "home"
        seed_benchy_book(home)
        result = level_dir / "llama_benchy.json"
        argv = benchy_command(server.base_url, model, tokenizer, load, result)
        ran = run_tool(argv, level_dir / "llama_benchy.log", api_key=server.api_key,
                       env={"HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        raw = json.loads(result.read_text()) if result.exists() and not ran["error"] else None
        theirs = parse_benchy(raw, load.concurrency) if raw else None
        if theirs:  # its report keeps the runs that worked; the log says which did not (client.py: "Error during run")
            theirs["failures"] = (level_dir / "llama_benchy.log").read_text(errors="replace").count("Error during run")
            theirs["failure_reasons"] = benchy_errors(level_dir / "llama_benchy.log")
        endpoint = "chat"
    else:
        raise ValueError(f"unknown peer client {tool!r}: one of aiperf, guidellm, llama-benchy")
    clock = {"theirs": server_clock.since(direct, their_mark, load.num_prompts)}
    on_wire = {"theirs": wire.run_figures(their_wire, load.num_prompts)} if wire else None
    lab_mark, lab_wire = server_clock.mark(direct), (wire.mark() if wire else None)
    lab_run = run_lab_client(server, load, endpoint=endpoint)
    clock["lab"] = server_clock.since(direct, lab_mark, load.num_prompts)
    if wire:
        on_wire["lab"] = wire.run_figures(lab_wire, load.num_prompts)
    ours = lab_metrics(metrics.summarise(lab_run.results, lab_run.duration_s))
    return {"tool": tool, "concurrency": load.concurrency, "endpoint": endpoint, "run": ran, "raw": raw,
            "theirs": theirs, "lab": ours, "lab_duration_s": lab_run.duration_s, "lab_client_cpu_s": lab_run.client_cpu_s,
            "lab_ttft_samples_ms": sorted(round(r.ttft_s * 1000, 1) for r in lab_run.results
                                          if r.success and r.ttft_s is not None),
            "server_clock": clock, **({"wire_clock": on_wire} if wire else {}),
            "rows": compare(tool, ours, theirs, clock, on_wire) if theirs else []}



def run(server, out_dir: str | Path, tools: tuple[str, ...] = DEFAULT_TOOLS,
        levels: tuple[int, ...] = LEVELS, load: PeerLoad = LOAD, repetitions: int = 1,
        wire: wire_clock.Wire | None = None) -> dict:
    """Each tool at each level, then the lab's client with the same load, on `server`, `repetitions` times over
    (tool by tool, level by level, so a repetition's pair stays back to back): the whole record. With `wire`, every
    client talks to the server through that proxy, and each run is timed on its clock too."""
    record = {"skipped": skip_reason(), "tolerance": TOLERANCE, "load": asdict(load), "levels": list(levels),
              "tools": list(tools), "repetitions": repetitions, "versions": (peers_info() or {}).get("tools"),
              "sources": SOURCES, "results": [], "ratios": []}
    if record["skipped"]:
        return record
    out_dir = Path(out_dir)
    tokenizer = tokenizer_path(peers_info())
    for rep in range(repetitions):
        for tool in tools:
            for c in levels:
                # at least two requests a stream, so a level is more than one batch; a seed of its own per repetition
                # and level, so no client meets prompts the server has cached from an earlier run (llama-server keeps
                # finished prompts: with one seed, guidellm's and the lab's repeats had 130 ms TTFTs where
                # llama-benchy's fresh prompts had 4.6 s, 2026-12-02)
                level = replace(load, concurrency=c, num_prompts=max(load.num_prompts, 2 * c),
                                seed=load.seed + 1000 * rep + c)
                one = _one_level(tool, server, level, tokenizer, out_dir / f"rep{rep + 1}", wire)
                record["results"].append({"repetition": rep + 1, **one})
    record["ratios"] = ratio_spread(record)
    return record


def run_on_profile(prof, run_dir: str | Path, wire: bool = False, **kw) -> dict:
    """`run` on a llama-server of its own for profile `prof` (started, run, stopped) into run_dir/peer_clients/
    (exports, logs, peer_clients.json); `wire`: the clients go through lab.measure.wire_clock's proxy."""
    from lab.serving import engines, serve

    out_dir = Path(run_dir) / "peer_clients"
    if skip_reason():
        return run(None, out_dir, **kw)
    out_dir.mkdir(parents=True, exist_ok=True)
    srv = serve.start(engines.build_command(prof, port=serve.free_port()), log_dir=out_dir, name="peer_clients")
    on_wire = wire_clock.Wire("127.0.0.1", srv.command.port).start() if wire else None
    try:
        record = run(srv, out_dir, wire=on_wire, **kw)
    finally:
        if on_wire:
            on_wire.stop()
        srv.stop()
    record["wire"] = bool(wire)
    record["server"] = {"profile": prof.name, "model": prof.model_file, "threads": prof.threads,
                        "parallel_slots": prof.parallel_slots, "argv": list(srv.command.argv)}
    record["provenance"] = provenance()
    evidence.write_whole(out_dir / "peer_clients.json", json.dumps(record, indent=2, default=str))
    return record


def run_on_smollm2(run_dir: str | Path, **kw) -> dict:
    """`run_on_profile` on the embedded SmolLM2 on the CPU (profile cpu-default, SERVER_THREADS threads), whatever the
    notebook's profile: this checks the client, not the model."""
    from lab.core import profiles

    return run_on_profile(profiles.load("cpu-default").model_copy(update={"threads": SERVER_THREADS}), run_dir, **kw)


def provenance() -> dict:
    """Where and when (the lab's one provenance: commit, host, UTC, versions) + the clients' python and versions
    and the machine's load (the record's raw samples are its results)."""
    import platform

    from lab.core import evidence

    info = peers_info() or {}
    return {**evidence.provenance(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "peers_python": info.get("python"), "peers_versions": info.get("tools"),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


# ---------------------------------------------------------------- show
def rows(record: dict) -> list[dict]:
    """Every compared metric of every tool, level and repetition (what notebook 06 shows)."""
    return [{"repetition": r.get("repetition", 1), "concurrency": r["concurrency"], **row}
            for r in record["results"] for row in r["rows"]]


def runs(record: dict) -> list[dict]:
    """Per tool, level and repetition: command line, exit status, seconds (the raw exports stay in the record)."""
    return [{"tool": r["tool"], "repetition": r.get("repetition", 1), "concurrency": r["concurrency"],
             "endpoint": r["endpoint"], "exit": r["run"]["returncode"], "seconds": r["run"]["seconds"],
             "command": r["run"]["command"], "error": r["run"]["error"]} for r in record["results"]]


HEADLINE = (("ttft_ms mean", "TTFT"), ("itl_ms mean", "ITL"), ("output_throughput", "out tok/s"),
            ("request_throughput", "req/s"))


def headline(record: dict) -> str:
    """One line: lab ÷ theirs (mean over repetitions, [min-max]) for TTFT, ITL and the two throughputs, per tool and
    level; "—" where the tool does not report it, "*" where a definition explains a difference beyond ±5 %."""
    parts = []
    for tool in record.get("tools") or []:
        for c in record["levels"]:
            cells = []
            for metric, label in HEADLINE:
                r = next((x for x in record.get("ratios") or [] if (x["tool"], x["concurrency"], x["metric"])
                          == (tool, c, metric)), None)
                if r is None or r["mean"] is None:
                    cells.append(f"{label} —")
                    continue
                mark = "*" if not r["within ±5 %"] and r["why they differ"] else ""
                cells.append(f"{label} {r['mean']:.3f}{mark} [{r['min']:.3f}-{r['max']:.3f}]")
            parts.append(f"{tool} c={c}: " + ", ".join(cells))
    return "lab ÷ theirs: " + "; ".join(parts)


def text(record: dict) -> str:
    if record["skipped"]:
        return f"peer-client check not run: {record['skipped']}"
    judged = [r for r in record.get("ratios") or [] if r["within ±5 %"] is not None]
    kinds = [verdict(r) for r in judged]
    ok, by_server, explained = kinds.count("within"), kinds.count("server clock"), kinds.count("definition")
    by_wire = kinds.count("wire clock")
    load = record["load"]
    return (f"{', '.join(f'{k} {v}' for k, v in (record['versions'] or {}).items() if k in record['tools'])}; "
            f"load per level: {load['num_prompts']} requests, ≈ {load['input_tokens']} prompt and "
            f"{load['output_tokens']} output tokens, concurrency {record['levels']}, {record.get('repetitions', 1)} "
            f"repetition(s).\n{ok} of {len(judged)} compared figures (mean over repetitions) within ±{TOLERANCE:.0%}; "
            f"{explained} more differ by definition (explained); {by_server} more by what the server did between "
            f"the two runs (its own log accounts for them); "
            + (f"{by_wire} more by when the server sent the first tokens (the wire's clock accounts for them); "
               if record.get("wire") else "")
            + f"{kinds.count('unexplained')} unexplained.\n"
            + headline(record))


def checks(record: dict) -> list[Check]:
    """Each tool ran and did every request with exactly the output asked for; each compared figure (mean over the
    repetitions) agrees or its difference is explained by a definition — a timing ratio beyond that is a warning:
    the clients ran back to back on a shared CPU."""
    if record["skipped"]:
        return [Check("peer clients", "skip", None, None, record["skipped"], "lab/setup/peers.py")]
    out = []
    n, o = record["load"]["num_prompts"], record["load"]["output_tokens"]
    for r in record["results"]:
        src = SOURCES[r["tool"]]
        name = f"peer client {r['tool']} c={r['concurrency']} rep {r.get('repetition', 1)}"
        out.append(Check(f"{name} ran", "fail" if r["run"]["error"] else "pass",
                         f"exit {r['run']['returncode']} in {r['run']['seconds']} s", "exit 0 with an export",
                         (r["run"]["error"] or "")[-300:], src))
        theirs = r["theirs"] or {}
        done = (theirs.get("successes"), theirs.get("failures"), r["lab"]["successes"])
        # every request accounted for is the pass; a peer's failed requests (llama-benchy's "Server disconnected",
        # benchy_errors) are a warning with their reason, the comparison uses the ones that worked
        counted = (done[0] or 0) + (done[1] or 0) == n and done[2] == n
        status = "fail" if not counted else ("warn" if done[1] else "pass")
        out.append(Check(f"{name}: requests (theirs ok, theirs failed, lab ok)", status, str(done), f"({n}, 0, {n})",
                         str(theirs.get("failure_reasons") or ""), src))
    for row in record.get("ratios") or []:
        if row["within ±5 %"] is None:
            continue
        status = "pass" if row["within ±5 %"] else "warn"
        out.append(Check(f"{row['tool']} c={row['concurrency']} {row['metric']}", status,
                         f"lab ÷ theirs {row['mean']} (range {row['min']}-{row['max']}, {len(row['samples'])} runs)",
                         f"within 1 ± {TOLERANCE}", row["why they differ"] or "", SOURCES[row["tool"]]))
    return out


# ---------------------------------------------------------------- command line (lab/device/run_h200.sh MODE=peers)
def main(argv: list[str] | None = None) -> int:
    """python -m lab.experiments.peer_clients --profile P --run-dir D [--levels 1,8,16 ...]: the check on P's server."""
    import argparse

    from lab.core import profiles

    ap = argparse.ArgumentParser(prog="python -m lab.experiments.peer_clients", description=main.__doc__)
    ap.add_argument("--profile", required=True, help="profile name or YAML file; its llama-server is started")
    ap.add_argument("--run-dir", required=True, type=Path, help="the record goes to RUN_DIR/peer_clients/")
    ap.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"comma-separated, of {', '.join(MODULES)}")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrency levels, e.g. 1,8,16")
    ap.add_argument("--requests", type=int, default=LOAD.num_prompts, help="requests a level (at least 2 a stream)")
    ap.add_argument("--input-tokens", type=int, default=LOAD.input_tokens)
    ap.add_argument("--output-tokens", type=int, default=LOAD.output_tokens)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--wire", action="store_true", help="clients talk through a timing proxy (lab.measure.wire_clock): "
                    "TTFT and latency of every request of both runs on one clock between them")
    args = ap.parse_args(argv)
    tools = tuple(t for t in args.tools.split(",") if t)
    bad = [t for t in tools if t not in MODULES]
    if bad:
        ap.error(f"--tools: unknown {', '.join(bad)}; choose from {', '.join(MODULES)}")
    load = replace(LOAD, num_prompts=args.requests, input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    record = run_on_profile(profiles.load(args.profile), args.run_dir, tools=tools, load=load,
                            levels=tuple(int(x) for x in args.levels.split(",")), repetitions=args.repetitions,
                            wire=args.wire)
    print(text(record), flush=True)
    for r in runs(record):
        print(f"{r['tool']} rep {r['repetition']} c={r['concurrency']}: exit {r['exit']} in {r['seconds']} s"
              + (f" — {r['error'][-300:]}" if r["error"] else ""), flush=True)
    return 0 if not record["skipped"] and all(r["run"]["error"] is None for r in record["results"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
