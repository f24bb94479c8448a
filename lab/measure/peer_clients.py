"""Peer check of the lab's client against benchmark clients from PyPI: llama-benchy, guidellm and aiperf (and the
`vllm bench serve` check of lab.measure.peer_bench, whose load and lab-client run this reuses), on one llama-server.

    record = peer_clients.run_on_smollm2(run_dir)   # into run_dir/peer_clients/; starts a CPU llama-server (embedded SmolLM2), runs, stops it
    peer_clients.ratio_spread(record)               # per tool, level, metric: lab ÷ theirs over repetitions, agrees or why not
    python -m lab.measure.peer_clients --profile P --run-dir D --levels 1,8,16 --repetitions 3   # any profile's server

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

The timing ratios depend on a shared CPU (the clients run back to back, not at once) and are recorded, never
asserted; what a run must get exactly right — requests done, output tokens — is (tests/test_peer_clients.py).
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

from lab.core import display, paths
from lab.core.checks import Check
from lab.measure import metrics
from lab.measure.peer_bench import PeerLoad, run_lab_client

PEERS_VENV = paths.ROOT / ".venv-peers"
WHY_MISSING = paths.ROOT / ".venv-peers.missing.json"
SETUP_HINT = "run `python3 -m lab.setup --peers` (or `LAB_PEERS=1 make setup`)"
TOLERANCE = 0.05  # the target: lab ÷ theirs within 5 %
TOOL_TIMEOUT_S = 400
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


# ---------------------------------------------------------------- where things are
def peers_info() -> dict | None:
    """What set-up wrote about the clients (tools and versions, python, tokenizers): .venv-peers/lab-peers.json, or
    the file LAB_PEERS_INFO names — on a machine without the venv (the H200 device: wheels installed with pip
    --target, lab/device/run_h200.sh MODE=peers), with "modules": true, the clients run as `python -m <module>`."""
    path = Path(os.environ.get("LAB_PEERS_INFO") or PEERS_VENV / "lab-peers.json")
    return json.loads(path.read_text()) if path.exists() else None


def skip_reason() -> str | None:
    """Why the peer-client check cannot run here (None: it can)."""
    info = peers_info()
    why = json.loads(WHY_MISSING.read_text())["why"] if WHY_MISSING.exists() else None
    if info is None:
        return f"{PEERS_VENV.name} is missing" + (f" (set-up could not install it: {why})" if why else "") + f": {SETUP_HINT}"
    tok = tokenizer_path(info)
    if not tok or not (Path(tok) / "tokenizer.json").exists():
        return f"no tokenizer for the peer clients" + (f" ({why})" if why else "") + f": {SETUP_HINT}"
    return None


def tokenizer_path(info: dict) -> str | None:
    """The HF tokenizer folder the clients size prompts with: the served model's ("served", written on the device),
    else the embedded SmolLM2's (what set-up makes here)."""
    toks = info.get("tokenizers") or {}
    return toks.get("served") or toks.get("smollm2")


def tool_bin(name: str) -> Path:
    return PEERS_VENV / "bin" / name


MODULES = {"aiperf": "aiperf", "llama-benchy": "llama_benchy", "guidellm": "guidellm"}


def tool_argv(name: str) -> list[str]:
    """How to start client `name`: its script in .venv-peers, or `python -m <module>` where set-up said "modules"."""
    info = peers_info() or {}
    return [info["python"], "-m", MODULES[name]] if info.get("modules") else [str(tool_bin(name))]


# ---------------------------------------------------------------- command lines
def aiperf_command(base_url: str, model: str, tokenizer: str, load: PeerLoad, out_dir: Path) -> list[str]:
    """`aiperf profile` for `load`: closed loop at C streams, N requests after 1 warm-up, synthetic prompts of
    exactly I tokens (its tokenizer), O output tokens forced (ignore_eos), token counts from the server's usage."""
    return [*tool_argv("aiperf"), "profile", "--url", base_url, "--model", model, "--endpoint-type", "completions",
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
    return [*tool_argv("llama-benchy"), "--base-url", base_url.rstrip("/") + "/v1", "--model", model,
            "--served-model-name", model, "--tokenizer", tokenizer, "--pp", str(load.input_tokens),
            "--tg", str(load.output_tokens), "--exact-tg", "--depth", "0", "--runs", str(runs),
            "--concurrency", str(load.concurrency), "--latency-mode", "none", "--skip-coherence",
            "--book-url", BENCHY_BOOK, "--format", "json", "--save-result", str(result)]


def guidellm_scenario(base_url: str, model: str, tokenizer: str, load: PeerLoad, result: Path,
                      api_key: str | None = None) -> dict:
    """guidellm's scenario (`guidellm run -c FILE`) for `load`: C concurrent streams, N requests, synthetic prompts of
    exactly I tokens (its tokenizer), O output tokens (it sends ignore_eos with max_tokens), greedy, on
    /v1/completions. Its warm-up phase is left at none: the lab's client and the other tools have warmed the server."""
    backend = {"kind": "openai_http", "target": base_url, "model": model, "request_format": "/v1/completions",
               "extras": {"body": {"temperature": 0}}}
    if api_key:
        backend["api_key"] = api_key  # SecretStr there: its export prints '**********'; the file is redacted after
    return {"spec": {"backend": backend, "profile": {"kind": "concurrent", "streams": [load.concurrency]},
                     "data": [{"kind": "synthetic_text", "prompt_tokens": load.input_tokens,
                               "output_tokens": load.output_tokens}],
                     "tokenizer": {"kind": "hf_auto", "model": tokenizer},
                     "constraints": [{"kind": "max_requests", "count": load.num_prompts}],
                     "outputs": [{"kind": "json", "path": str(result)}],
                     "seed": {"kind": "static", "value": load.seed}}}


def guidellm_command(scenario: Path) -> list[str]:
    return [*tool_argv("guidellm"), "run", "-c", str(scenario), "--disable-progress"]


# llama-server (cpp-httplib) closes a keep-alive connection after 5 s idle (vendor/cpp-httplib/httplib.h:26
# CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND 5); llama-benchy keeps its pool's connections for 600 s (llama_benchy/runner.py:58
# keepalive_timeout=600) and aiohttp raises "Server disconnected" when it sends on one the server has closed: seen
# for 3 of 16 one-stream runs on the loaded 2-core machine (2026-12-02). The lab's client (httpx: idle connections
# dropped after 5 s, httpx.Limits keepalive_expiry) and guidellm (the same, backends/openai/http.py) match the server.
# Recorded per level; the comparison uses the runs that worked.
def benchy_errors(log: Path) -> dict:
    """llama-benchy's failed runs by reason, from its log."""
    out: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("Error during run"):
            why = line.split(":", 1)[-1].strip()[:120]
            out[why] = out.get(why, 0) + 1
    return out


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
    # PYTHONPATH: where set-up put the clients when they are not a venv (the device: pip --target; peers_info)
    where = (peers_info() or {}).get("pythonpath")
    extra = {"NO_PROXY": "127.0.0.1,localhost", **({"PYTHONPATH": where} if where else {}), **(env or {})}
    # The server's key, as both clients read it (aiperf: --api-key; llama-benchy: --api-key): kept out of the record.
    # One argument "--api-key=KEY": the lab's keys (secrets.token_urlsafe) may start with "-", which both parsers
    # would take for an option if it came as a separate argument (aiperf: "--api-key requires an argument", seen here).
    key_args = [f"--api-key={api_key}"] if api_key else []
    import resource

    t0, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(argv + key_args, env={**engines.minimal_env(), **extra}, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=TOOL_TIMEOUT_S, cwd=log.parent)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the client's own CPU seconds (its worker processes too): on 2 shared cores a client's CPU slows the server
    out = {"command": " ".join(shlex.quote(a) for a in argv), "returncode": code,
           "seconds": round(time.monotonic() - t0, 1), "log": str(log), "error": None,
           "client_cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 2)}
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

    # its per-request (last − first content chunk) ÷ the tokens after the first: the lab's per-chunk ITL mean too
    # (llama-server streams one token a chunk; all requests have the same length, so per-request = token-weighted)
    return {"ttft_ms": block(ttft), "tpot_ms": block(tpot), "itl_ms": {"mean": block(tpot)["mean"], "p50": None},
            "e2el_ms": {"mean": None, "p50": None}, "output_throughput": total, "request_throughput": None,
            "successes": len(ttft), "ttfr_ms": block((run.get("ttfr") or {}).get("values") or [])}


GUIDELLM_KEPT = ("request_totals", "requests_per_second", "request_latency", "prompt_token_count", "output_token_count",
                 "time_to_first_token_ms", "time_per_output_token_ms", "inter_token_latency_ms",
                 "output_tokens_per_second", "request_streaming_iterations_count")


def slim_guidellm(report: dict) -> dict:
    """guidellm's export less what the comparison never reads (per-request prompts and outputs, the other metrics'
    distributions: ~140 kB a run): its version, each benchmark's times and the GUIDELLM_KEPT metrics (successful)."""
    keep = {"metadata": report.get("metadata"), "benchmarks": []}
    for b in report.get("benchmarks", []):
        m = b.get("metrics") or {}
        keep["benchmarks"].append({
            **{k: b.get(k) for k in ("type_", "start_time", "end_time", "duration", "warmup_duration", "cooldown_duration")},
            "metrics": {k: ({"successful": m[k].get("successful")} if isinstance(m[k], dict) and "successful" in m[k]
                            else m[k]) for k in GUIDELLM_KEPT if k in m}})
    return keep


def parse_guidellm(report: dict) -> dict:
    """guidellm's benchmarks.json (one benchmark) → the lab's metric names. Its ITL (token-weighted (last − first
    token chunk) ÷ (tokens − 1)) is the lab's per-chunk ITL mean and, less the stream's tail, its TPOT; its own TPOT
    (first token included) is kept apart, not compared."""
    m = report["benchmarks"][0]["metrics"]

    def ok(tag):
        return m.get(tag, {}).get("successful") or {}

    def block(tag, scale=1.0):
        d = ok(tag)
        p50 = (d.get("percentiles") or {}).get("p50")
        return {"mean": None if d.get("mean") is None else d["mean"] * scale,
                "p50": None if p50 is None else p50 * scale}

    itl = block("inter_token_latency_ms")
    return {"ttft_ms": block("time_to_first_token_ms"), "tpot_ms": itl, "itl_ms": {"mean": itl["mean"], "p50": None},
            "e2el_ms": block("request_latency", 1000.0), "output_throughput": ok("output_tokens_per_second").get("mean"),
            "request_throughput": ok("requests_per_second").get("mean"),
            "successes": (m.get("request_totals") or {}).get("successful"),
            "failures": sum((m.get("request_totals") or {}).get(k) or 0 for k in ("errored", "incomplete")),
            "prompt_tokens_mean": ok("prompt_token_count").get("mean"),
            "output_tokens_mean": ok("output_token_count").get("mean"),
            "tpot_incl_first_ms": block("time_per_output_token_ms"), "duration_s": report["benchmarks"][0].get("duration")}


def lab_metrics(summary: dict) -> dict:
    """The lab's summary (lab.measure.metrics.summarise) reduced to the compared metrics."""
    return {k: summary[k] for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput",
                                    "request_throughput", "successes", "prompt_tokens_mean", "output_tokens_mean")}


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
        elif key == "itl_ms" and sub == "mean" and not within:
            why = _itl_per_chunk(ours, ratio)
        rows.append({"tool": tool, "metric": name, "lab": display.rounded(a), "theirs": display.rounded(b),
                     "lab ÷ theirs": display.rounded(ratio), "within ±5 %": within if b is not None else None,
                     "why they differ": None if within else why})
    return rows


def _itl_per_chunk(ours: dict, ratio: float | None) -> str | None:
    """The definition behind an ITL ratio, checked against the run's own counts: the lab's ITL is the gap between
    stream chunks (lab.measure.metrics, vLLM bench serve's definition); the peers' is per token (llama-benchy: its
    TPOT; guidellm request_stats.py:354: decode time ÷ (tokens − 1)). llama-server holds back a token that ends
    inside a UTF-8 character and sends it with the next, so a chunk can carry several tokens (random weights do
    that often). Explained when lab ÷ theirs ÷ (tokens per chunk gap) is within TOLERANCE; None otherwise."""
    gaps = (ours.get("itl_ms") or {}).get("n")
    tokens = ours.get("successes", 0) * ((ours.get("output_tokens_mean") or 1) - 1)
    if not gaps or not tokens or ratio is None:
        return None
    per_chunk = tokens / gaps
    if abs(ratio / per_chunk - 1) > TOLERANCE:
        return None
    return (f"the lab's ITL is per stream chunk, theirs per token: a chunk carried {per_chunk:.2f} tokens here "
            f"({tokens:.0f} tokens in {gaps} gaps; llama-server sends a token ending inside a UTF-8 character with "
            f"the next), and lab ÷ theirs ÷ that = {ratio / per_chunk:.3f}")


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
    elif tool == "guidellm":
        result, scenario = level_dir / "benchmarks.json", level_dir / "scenario.json"
        result.unlink(missing_ok=True)
        spec = guidellm_scenario(server.base_url, model, tokenizer, load, result, server.api_key)
        scenario.write_text(json.dumps(spec, indent=1))
        try:
            ran = run_tool(guidellm_command(scenario), level_dir / "guidellm.log",
                           env={"HOME": str(level_dir), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        finally:  # the server's key stays out of the run folder
            spec["spec"]["backend"].pop("api_key", None)
            scenario.write_text(json.dumps(spec, indent=1))
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
    lab_run = run_lab_client(server, load, endpoint=endpoint)
    ours = lab_metrics(metrics.summarise(lab_run.results, lab_run.duration_s))
    return {"tool": tool, "concurrency": load.concurrency, "endpoint": endpoint, "run": ran, "raw": raw,
            "theirs": theirs, "lab": ours, "lab_duration_s": lab_run.duration_s, "lab_client_cpu_s": lab_run.client_cpu_s,
            "rows": compare(tool, ours, theirs) if theirs else []}


def run(server, out_dir: str | Path, tools: tuple[str, ...] = DEFAULT_TOOLS,
        levels: tuple[int, ...] = LEVELS, load: PeerLoad = LOAD, repetitions: int = 1) -> dict:
    """Each tool at each level, then the lab's client with the same load, on `server`, `repetitions` times over
    (tool by tool, level by level, so a repetition's pair stays back to back): the whole record."""
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
                one = _one_level(tool, server, level, tokenizer, out_dir / f"rep{rep + 1}")
                record["results"].append({"repetition": rep + 1, **one})
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
        why = (rows_[0]["why they differ"] if not xs else EXPLAIN.get((tool, metric))
               or (rows_[0]["why they differ"] if all(x["why they differ"] for x in rows_) else None))
        out.append({"tool": tool, "concurrency": c, "metric": metric, "samples": xs,
                    "mean": display.rounded(mean), "min": min(xs) if xs else None, "max": max(xs) if xs else None,
                    "within ±5 %": within, "why they differ": None if within else why})
    return out


def run_on_profile(prof, run_dir: str | Path, **kw) -> dict:
    """`run` on a llama-server of its own for profile `prof` (started, run, stopped) into run_dir/peer_clients/
    (exports, logs, peer_clients.json)."""
    from lab.serving import engines, serve

    out_dir = Path(run_dir) / "peer_clients"
    if skip_reason():
        return run(None, out_dir, **kw)
    out_dir.mkdir(parents=True, exist_ok=True)
    srv = serve.start(engines.build_command(prof, port=serve.free_port()), log_dir=out_dir, name="peer_clients")
    try:
        record = run(srv, out_dir, **kw)
    finally:
        srv.stop()
    record["server"] = {"profile": prof.name, "model": prof.model_file, "threads": prof.threads,
                        "parallel_slots": prof.parallel_slots, "argv": list(srv.command.argv)}
    record["provenance"] = provenance()
    (out_dir / "peer_clients.json").write_text(json.dumps(record, indent=2, default=str))
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
    ok = sum(bool(r["within ±5 %"]) for r in judged)
    explained = sum(1 for r in judged if not r["within ±5 %"] and r["why they differ"])
    load = record["load"]
    return (f"{', '.join(f'{k} {v}' for k, v in (record['versions'] or {}).items() if k in record['tools'])}; "
            f"load per level: {load['num_prompts']} requests, ≈ {load['input_tokens']} prompt and "
            f"{load['output_tokens']} output tokens, concurrency {record['levels']}, {record.get('repetitions', 1)} "
            f"repetition(s).\n{ok} of {len(judged)} compared figures (mean over repetitions) within ±{TOLERANCE:.0%}; "
            f"{explained} more differ by definition (explained); {len(judged) - ok - explained} unexplained.\n"
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
    """python -m lab.measure.peer_clients --profile P --run-dir D [--levels 1,8,16 ...]: the check on P's server."""
    import argparse

    from lab.core import profiles

    ap = argparse.ArgumentParser(prog="python -m lab.measure.peer_clients", description=main.__doc__)
    ap.add_argument("--profile", required=True, help="profile name or YAML file; its llama-server is started")
    ap.add_argument("--run-dir", required=True, type=Path, help="the record goes to RUN_DIR/peer_clients/")
    ap.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"comma-separated, of {', '.join(MODULES)}")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrency levels, e.g. 1,8,16")
    ap.add_argument("--requests", type=int, default=LOAD.num_prompts, help="requests a level (at least 2 a stream)")
    ap.add_argument("--input-tokens", type=int, default=LOAD.input_tokens)
    ap.add_argument("--output-tokens", type=int, default=LOAD.output_tokens)
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args(argv)
    tools = tuple(t for t in args.tools.split(",") if t)
    bad = [t for t in tools if t not in MODULES]
    if bad:
        ap.error(f"--tools: unknown {', '.join(bad)}; choose from {', '.join(MODULES)}")
    load = replace(LOAD, num_prompts=args.requests, input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    record = run_on_profile(profiles.load(args.profile), args.run_dir, tools=tools, load=load,
                            levels=tuple(int(x) for x in args.levels.split(",")), repetitions=args.repetitions)
    print(text(record), flush=True)
    for r in runs(record):
        print(f"{r['tool']} rep {r['repetition']} c={r['concurrency']}: exit {r['exit']} in {r['seconds']} s"
              + (f" — {r['error'][-300:]}" if r["error"] else ""), flush=True)
    return 0 if not record["skipped"] and all(r["run"]["error"] is None for r in record["results"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
