"""Peer check of the lab's client against benchmark clients from PyPI: aiperf and llama-benchy (and the
`vllm bench serve` check of lab.measure.peer_bench, whose load and lab-client run this reuses), on one llama-server.

    record = peer_clients.run_on_smollm2(run_dir)   # into run_dir/peer_clients/; starts a CPU llama-server (embedded SmolLM2), runs, stops it
    peer_clients.rows(record)                       # metric by metric: lab ÷ theirs, agrees or why not

Same load per level (lab.measure.peer_bench.PeerLoad): N requests, ≈ I prompt tokens, exactly O output tokens
(ignore_eos, temperature 0), at most C in flight, one warm-up first; the clients run one after the other on the
same server, and the lab's client runs again right after each peer (the same endpoint it used: aiperf on
/v1/completions, llama-benchy on /v1/chat/completions, its only endpoint), so a drift of the shared CPU between
the two runs stays small. The clients live in .venv-peers (lab/setup/peers.py), never in the lab's venv.

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
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
from dataclasses import asdict, replace
from pathlib import Path

from lab.core import paths
from lab.core.checks import Check
from lab.measure import metrics
from lab.measure.peer_bench import PeerLoad, run_lab_client

PEERS_VENV = paths.ROOT / ".venv-peers"
WHY_MISSING = paths.ROOT / ".venv-peers.missing.json"
SETUP_HINT = "run `python3 -m lab.setup --peers` (or `LAB_PEERS=1 make setup`)"
TOLERANCE = 0.05  # the target: lab ÷ theirs within 5 %
TOOL_TIMEOUT_S = 400
# 2 levels × 16 requests × 64 tokens: ~1-2 s of decode per level on 2 cores with the 135M model, enough chunks
# (≈ 1000 per level) that per-chunk means are stable; TTFT of a 128-token prompt is ~15-40 ms here.
LEVELS = (1, 2)
LOAD = PeerLoad(num_prompts=16, concurrency=1, input_tokens=128, output_tokens=64)
SOURCES = {"aiperf": "aiperf 0.13.0 aiperf/metrics/types/{ttft,inter_token_latency,inter_chunk_latency,"
                     "output_token_throughput,benchmark_duration}_metric(s).py",
           "llama-benchy": "llama-benchy 0.4.0 llama_benchy/client.py run_generation, results.py _process_batch"}
# Why a ratio may leave 1 ± TOLERANCE although both clients measure right: per (tool, metric), from the sources above.
EXPLAIN = {
    ("aiperf", "e2el_ms mean"): "aiperf ends request latency at the last response it parsed; the lab at [DONE] "
                                "(after the usage chunk): the lab's is longer by that tail",
    ("llama-benchy", "tpot_ms mean"): "llama-benchy's decode window ends at the last content chunk; the lab's "
                                      "TPOT window at the end of the stream ([DONE]): the lab's is longer by that tail "
                                      "÷ (output tokens − 1)",
    ("llama-benchy", "tpot_ms p50"): "as TPOT mean",
    ("llama-benchy", "output_throughput"): "not the same quantity: llama-benchy's total t/s is decode tokens ÷ (last "
                                           "− first token of a batch), leaving out prefill and the gap between "
                                           "batches; at 1 stream it is the per-request decode rate",
}
# Metrics each tool reports, in the lab's names (lab.measure.metrics.summarise): (key, statistic).
COMPARED = [("ttft_ms", "mean"), ("ttft_ms", "p50"), ("tpot_ms", "mean"), ("tpot_ms", "p50"), ("itl_ms", "mean"),
            ("itl_ms", "p50"), ("e2el_ms", "mean"), ("output_throughput", None), ("request_throughput", None)]


# ---------------------------------------------------------------- where things are
def peers_info() -> dict | None:
    path = PEERS_VENV / "lab-peers.json"
    return json.loads(path.read_text()) if path.exists() else None


def skip_reason() -> str | None:
    """Why the peer-client check cannot run here (None: it can)."""
    info = peers_info()
    why = json.loads(WHY_MISSING.read_text())["why"] if WHY_MISSING.exists() else None
    if info is None:
        return f"{PEERS_VENV.name} is missing" + (f" (set-up could not install it: {why})" if why else "") + f": {SETUP_HINT}"
    tok = (info.get("tokenizers") or {}).get("smollm2")
    if not tok or not (Path(tok) / "tokenizer.json").exists():
        return f"no tokenizer for the peer clients" + (f" ({why})" if why else "") + f": {SETUP_HINT}"
    return None


def tool_bin(name: str) -> Path:
    return PEERS_VENV / "bin" / name


# ---------------------------------------------------------------- command lines
def aiperf_command(base_url: str, model: str, tokenizer: str, load: PeerLoad, out_dir: Path) -> list[str]:
    """`aiperf profile` for `load`: closed loop at C streams, N requests after 1 warm-up, synthetic prompts of
    exactly I tokens (its tokenizer), O output tokens forced (ignore_eos), token counts from the server's usage."""
    return [str(tool_bin("aiperf")), "profile", "--url", base_url, "--model", model, "--endpoint-type", "completions",
            "--streaming", "--tokenizer", tokenizer, "--use-server-token-count", "--use-legacy-max-tokens",
            "--isl", str(load.input_tokens), "--isl-stddev", "0", "--osl", str(load.output_tokens), "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0",
            "--concurrency", str(load.concurrency), "--request-count", str(load.num_prompts),
            "--warmup-request-count", str(load.warmup_requests), "--random-seed", str(load.seed),
            "--artifact-dir", str(out_dir), "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
            "--no-auto-plot"]


BENCHY_BOOK = "lab:heldout"  # not fetched: its cache file is written first (llama-benchy would download Gutenberg)


def benchy_command(base_url: str, model: str, tokenizer: str, load: PeerLoad, result: Path) -> list[str]:
    """llama-benchy for `load`: N ÷ C runs of C requests started together (+ its warm-up run), prompts of I tokens
    cut from a text, exactly O output tokens (--exact-tg: ignore_eos + min_tokens), no latency subtraction."""
    runs = max(1, load.num_prompts // load.concurrency)
    return [str(tool_bin("llama-benchy")), "--base-url", base_url.rstrip("/") + "/v1", "--model", model,
            "--served-model-name", model, "--tokenizer", tokenizer, "--pp", str(load.input_tokens),
            "--tg", str(load.output_tokens), "--exact-tg", "--depth", "0", "--runs", str(runs),
            "--concurrency", str(load.concurrency), "--latency-mode", "none", "--skip-coherence",
            "--book-url", BENCHY_BOOK, "--format", "json", "--save-result", str(result)]


def seed_benchy_book(home: Path) -> Path:
    """Write llama-benchy's cached copy of BENCHY_BOOK (~/.cache/llama-benchy/<md5 of the URL>.txt, corpus.py) from
    the lab's own text (lab/data/heldout.txt), so it reads that instead of downloading a book."""
    cache = home / ".cache" / "llama-benchy"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{hashlib.md5(BENCHY_BOOK.encode()).hexdigest()}.txt"
    path.write_text((paths.ROOT / "lab" / "data" / "heldout.txt").read_text())
    return path


def run_tool(argv: list[str], log: Path, env: dict | None = None, api_key: str | None = None) -> dict:
    """Run one client; its command, exit status, seconds and, on failure, the log's tail."""
    from lab.serving import engines

    log.parent.mkdir(parents=True, exist_ok=True)
    extra = {"NO_PROXY": "127.0.0.1,localhost", **(env or {})}
    # The server's key, as both clients read it (aiperf: --api-key; llama-benchy: --api-key): kept out of the record.
    # One argument "--api-key=KEY": the lab's keys (secrets.token_urlsafe) may start with "-", which both parsers
    # would take for an option if it came as a separate argument (aiperf: "--api-key requires an argument", seen here).
    key_args = [f"--api-key={api_key}"] if api_key else []
    t0 = time.monotonic()
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(argv + key_args, env={**engines.minimal_env(), **extra}, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=TOOL_TIMEOUT_S, cwd=log.parent)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    out = {"command": " ".join(shlex.quote(a) for a in argv), "returncode": code,
           "seconds": round(time.monotonic() - t0, 1), "log": str(log), "error": None}
    if code != 0:
        out["error"] = f"exit {code}: " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-12:])
    return out


# ---------------------------------------------------------------- their exports → the lab's names (pure)
def parse_aiperf(export: dict) -> dict:
    """aiperf's profile_export_aiperf.json → the lab's metric names (ms, per second)."""
    def stat(tag, which):
        m = export.get(tag) or (export.get("metrics") or {}).get(tag) or {}
        return m.get({"mean": "avg"}.get(which, which))

    def block(tag):
        return {"mean": stat(tag, "mean"), "p50": stat(tag, "p50")}

    return {"ttft_ms": block("time_to_first_token"), "tpot_ms": block("inter_token_latency"),
            "itl_ms": block("inter_chunk_latency"), "e2el_ms": block("request_latency"),
            "output_throughput": stat("output_token_throughput", "mean"),
            "request_throughput": stat("request_throughput", "mean"),
            "successes": stat("request_count", "mean"), "prompt_tokens_mean": stat("input_sequence_length", "mean"),
            "output_tokens_mean": stat("output_sequence_length", "mean")}


def parse_benchy(report: dict, concurrency: int) -> dict:
    """llama-benchy's JSON report → the lab's metric names. TPOT from its per-request decode rates (1000 ÷ t/s);
    no ITL per chunk, no E2E latency, no request throughput in its report (None)."""
    run = next(b for b in report["benchmarks"] if b["concurrency"] == concurrency and not b["is_context_prefill_phase"])
    ttft = (run.get("e2e_ttft") or {}).get("values") or []
    rates = (run.get("tg_req_throughput") or {}).get("values") or []
    tpot = [1000 / r for r in rates if r]
    total = (run.get("tg_throughput") or {}).get("mean")

    def block(ms):
        return {"mean": sum(ms) / len(ms) if ms else None, "p50": metrics.percentile(ms, 50)}

    return {"ttft_ms": block(ttft), "tpot_ms": block(tpot), "itl_ms": {"mean": None, "p50": None},
            "e2el_ms": {"mean": None, "p50": None}, "output_throughput": total, "request_throughput": None,
            "successes": len(ttft), "ttfr_ms": block((run.get("ttfr") or {}).get("values") or [])}


def lab_metrics(summary: dict) -> dict:
    """The lab's summary (lab.measure.metrics.summarise) reduced to the compared metrics."""
    return {k: summary[k] for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput",
                                    "request_throughput", "successes", "prompt_tokens_mean")}


def _get(d: dict, key: str, sub: str | None):
    v = d.get(key)
    return v.get(sub) if sub and isinstance(v, dict) else v


def compare(tool: str, ours: dict, theirs: dict) -> list[dict]:
    """Metric by metric: lab, theirs, lab ÷ theirs, within TOLERANCE, and the reason where a definition differs."""
    rows = []
    for key, sub in COMPARED:
        name = f"{key} {sub}" if sub else key
        a, b = _get(ours, key, sub), _get(theirs, key, sub)
        ratio = metrics.ratio(a, b)
        within = ratio is not None and abs(ratio - 1) <= TOLERANCE
        why = EXPLAIN.get((tool, name))
        if b is None:
            why = f"{tool} does not report it"
        rows.append({"tool": tool, "metric": name, "lab": _round(a), "theirs": _round(b),
                     "lab ÷ theirs": _round(ratio, 3), "within ±5 %": within if b is not None else None,
                     "why they differ": None if within else why})
    return rows


def _round(x, nd: int = 2):
    return None if x is None else round(x, nd)


# ---------------------------------------------------------------- orchestrate
def _one_level(tool: str, server, load: PeerLoad, tokenizer: str, out_dir: Path) -> dict:
    model = server.command.served_model or "default"
    level_dir = out_dir / f"{tool}-c{load.concurrency}"
    level_dir.mkdir(parents=True, exist_ok=True)
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
    else:
        home = level_dir / "home"
        seed_benchy_book(home)
        result = level_dir / "llama_benchy.json"
        argv = benchy_command(server.base_url, model, tokenizer, load, result)
        ran = run_tool(argv, level_dir / "llama_benchy.log", api_key=server.api_key,
                       env={"HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        raw = json.loads(result.read_text()) if result.exists() and not ran["error"] else None
        theirs = parse_benchy(raw, load.concurrency) if raw else None
        endpoint = "chat"
    lab_run = run_lab_client(server, load, endpoint=endpoint)
    ours = lab_metrics(metrics.summarise(lab_run.results, lab_run.duration_s))
    return {"tool": tool, "concurrency": load.concurrency, "endpoint": endpoint, "run": ran, "raw": raw,
            "theirs": theirs, "lab": ours, "lab_duration_s": lab_run.duration_s,
            "rows": compare(tool, ours, theirs) if theirs else []}


def run(server, out_dir: str | Path, tools: tuple[str, ...] = ("aiperf", "llama-benchy"),
        levels: tuple[int, ...] = LEVELS, load: PeerLoad = LOAD) -> dict:
    """Each tool at each level, then the lab's client with the same load, on `server`: the whole record."""
    record = {"skipped": skip_reason(), "tolerance": TOLERANCE, "load": asdict(load), "levels": list(levels),
              "tools": {}, "versions": (peers_info() or {}).get("tools"), "sources": SOURCES, "results": []}
    if record["skipped"]:
        return record
    out_dir = Path(out_dir)
    tokenizer = peers_info()["tokenizers"]["smollm2"]
    for tool in tools:
        for c in levels:
            record["results"].append(_one_level(tool, server, replace(load, concurrency=c), tokenizer, out_dir))
    return record


def run_on_smollm2(run_dir: str | Path, **kw) -> dict:
    """`run` on a llama-server of its own — the embedded SmolLM2 on the CPU (profile cpu-default), stopped after —
    into run_dir/peer_clients/ (exports, logs, peer_clients.json). Whatever the notebook's profile: this checks the
    client, not the model."""
    from lab.core import profiles
    from lab.serving import engines, serve

    out_dir = Path(run_dir) / "peer_clients"
    if skip_reason():
        return run(None, out_dir, **kw)
    out_dir.mkdir(parents=True, exist_ok=True)
    prof = profiles.load("cpu-default")
    srv = serve.start(engines.build_command(prof, port=serve.free_port()), log_dir=out_dir, name="peer_clients")
    try:
        record = run(srv, out_dir, **kw)
    finally:
        srv.stop()
    record["server"] = {"profile": prof.name, "model": prof.model_file, "threads": prof.threads,
                        "parallel_slots": prof.parallel_slots}
    (out_dir / "peer_clients.json").write_text(json.dumps(record, indent=2, default=str))
    return record


# ---------------------------------------------------------------- show
def rows(record: dict) -> list[dict]:
    """Every compared metric of every tool and level (what notebook 06 shows)."""
    return [{"concurrency": r["concurrency"], **row} for r in record["results"] for row in r["rows"]]


def runs(record: dict) -> list[dict]:
    """Per tool and level: command line, exit status, seconds (the raw exports stay in the record)."""
    return [{"tool": r["tool"], "concurrency": r["concurrency"], "endpoint": r["endpoint"],
             "exit": r["run"]["returncode"], "seconds": r["run"]["seconds"], "command": r["run"]["command"],
             "error": r["run"]["error"]} for r in record["results"]]


def text(record: dict) -> str:
    if record["skipped"]:
        return f"peer-client check not run: {record['skipped']}"
    rs = rows(record)
    judged = [r for r in rs if r["within ±5 %"] is not None]
    ok = sum(bool(r["within ±5 %"]) for r in judged)
    explained = sum(1 for r in judged if not r["within ±5 %"] and r["why they differ"])
    load = record["load"]
    return (f"{', '.join(f'{k} {v}' for k, v in (record['versions'] or {}).items())}; load per level: "
            f"{load['num_prompts']} requests, ≈ {load['input_tokens']} prompt and {load['output_tokens']} output tokens, "
            f"concurrency {record['levels']}.\n{ok} of {len(judged)} compared figures within ±{TOLERANCE:.0%}; "
            f"{explained} more differ by definition (explained); {len(judged) - ok - explained} unexplained.")


def checks(record: dict) -> list[Check]:
    """Each tool ran; each compared figure agrees or its difference is explained by a definition."""
    if record["skipped"]:
        return [Check("peer clients (aiperf, llama-benchy)", "skip", None, None, record["skipped"], "lab/setup/peers.py")]
    out = []
    for r in record["results"]:
        src = SOURCES[r["tool"]]
        out.append(Check(f"peer client {r['tool']} c={r['concurrency']} ran", "fail" if r["run"]["error"] else "pass",
                         f"exit {r['run']['returncode']} in {r['run']['seconds']} s", "exit 0 with an export",
                         (r["run"]["error"] or "")[-300:], src))
        for row in r["rows"]:
            if row["within ±5 %"] is None:
                continue
            status = "pass" if row["within ±5 %"] else ("warn" if row["why they differ"] else "fail")
            out.append(Check(f"{r['tool']} c={r['concurrency']} {row['metric']}", status,
                             f"lab {row['lab']} vs {row['theirs']} (ratio {row['lab ÷ theirs']})",
                             f"ratio within 1 ± {TOLERANCE}", row["why they differ"] or "", src))
    return out
