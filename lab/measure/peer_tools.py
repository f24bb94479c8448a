"""The peer benchmark clients themselves (llama-benchy, guidellm, aiperf in .venv-peers, lab/setup/peers.py): where
they are and whether they can run here, their command lines for one load (lab.measure.peer_bench.PeerLoad), running
one, and reading its export into the lab's metric names (pure). lab.experiments.peer_clients runs them beside the lab's
client and compares."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

from lab.core import display, evidence, paths
from lab.measure import metrics
from lab.measure.peer_bench import PeerLoad

PEERS_VENV = paths.PEERS_VENV
WHY_MISSING = paths.PEERS_WHY_MISSING
SETUP_HINT = "run `python3 -m lab.setup --peers` (or `LAB_PEERS=1 make setup`)"
TOOL_TIMEOUT_S = 400


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
            why = display.clip(line.split(":", 1)[-1].strip(), 120)
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
    with evidence.open_stream(log) as fh:
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
