"""A streaming load generator for OpenAI-compatible servers, and the in-process speed from llama-bench.

Four layers, kept apart (vLLM's several-hundred-line `benchmark()` is the counter-example):

* measure     `stream_request`: one streamed request → a `RequestResult` (failures recorded, never raised);
* orchestrate `run_load` / `sweep`: warm-up, then a fixed concurrency or Poisson arrivals under a request
              or time budget; `llama_bench` runs the real `llama-bench -o json`;
* summarise   `summarise(results, duration_s, slo, criteria)`: pure arithmetic, `None` where nothing
              succeeded (never 0), and a validity verdict with reasons (MLPerf-loadgen style);
* show        `sweep_frame`, `sweep_chart`, `requests_frame`.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py `calculate_metrics`): TTFT = send →
first streamed chunk carrying generated text; ITL = gaps between consecutive such chunks; TPOT =
(E2EL − TTFT) / (output tokens − 1) per request; E2EL = send → end of stream; goodput = requests/s that
met every SLO. Output and prompt tokens come from the server's `usage` (requested with
`stream_options: {include_usage: true}`; llama-server also sends `timings` in its last chunk), never from
counting chunks. Prompts differ per request from their first word on: llama-server keeps a prompt cache,
so a repeated prompt set fakes TTFT (llama.cpp tools/server: --cache-ram, the prompt cache); cached prompt tokens are read from the usage.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

# Common one-token English words: prompts made of them land near a target token count on most tokenizers.
_WORDS = ("the of and to in is was for on are with as his they be at one have this from or had by word but "
          "what some we can out other were all there when up use your how said an each she which do their "
          "time if will way about many then them write would like so these her long make thing see him two "
          "has look more day could go come did number sound no most people my over know water than call "
          "first who may down side been now find any new work part take get place made live where after "
          "back little only round man year came show every good me give our under name very through just "
          "form sentence great think say help low line differ turn cause much mean before move right boy "
          "old too same tell does set three want air well also play small end put home read hand port large "
          "spell add even land here must big high such follow act why ask men change went light kind off "
          "need house picture try us again animal point mother world near build self earth father head stand "
          "own page should country found answer school grow study still learn plant cover food sun four "
          "between state keep eye never last let thought city tree cross farm hard start might story saw far "
          "sea draw left late run while press close night real life few north open seem together next white "
          "children begin got walk example ease paper group always music those both mark often letter until "
          "mile river car feet care second book carry took science eat room friend began idea fish mountain "
          "stop once base hear horse cut sure watch color face wood main enough plain girl usual young ready "
          "above ever red list though feel talk bird soon body dog family direct pose leave song measure door").split()


# ================================================================ records
@dataclass
class RequestResult:
    """One request as the client saw it. Times in seconds; `start_s` from the run's start, the others
    from this request's send. A failed request keeps what arrived before it failed (partial record)."""

    index: int
    success: bool = False
    error: str | None = None
    start_s: float = 0.0
    ttft_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)  # arrival of every chunk with generated text
    e2el_s: float | None = None
    output_tokens: int | None = None  # usage.completion_tokens; chunks with text when the server sends no usage
    prompt_tokens: int | None = None  # usage.prompt_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (or llama-server timings.cache_n)
    output_chars: int = 0
    server_timings: dict | None = None  # llama-server's `timings` of the last chunk
    # First and last chunk carrying `choices` at all, text or not: where `vllm bench serve` starts TTFT and
    # ends latency (vllm/benchmarks/lib/endpoint_request_func.py), for comparing with it (lab.measure.peer_bench).
    first_choice_s: float | None = None
    last_choice_s: float | None = None
    choice_chunks: int = 0
    tokens_from: str | None = None  # "usage" (the server's count) or "chunks" (no usage came: one token per chunk assumed)

    @property
    def itl_s(self) -> list[float]:
        t = self.chunk_times_s
        return [b - a for a, b in zip(t, t[1:])]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Target:
    """Where and what to send: an OpenAI-compatible base URL, the model name, and the request shape."""

    base_url: str
    model: str = "default"
    max_tokens: int = 64
    endpoint: str = "completions"  # or "chat"
    api_key: str | None = None
    ignore_eos: bool = True  # fixed output length (llama-server and vLLM honour it)
    timeout_s: float = 300.0
    extra_body: dict | None = None  # more request fields (lab.measure.tune's sampling variants: samplers, top_k, ...)

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def payload(self, prompt: str) -> dict:
        body = {"model": self.model, "max_tokens": self.max_tokens, "stream": True, "temperature": 0,
                "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.extra_body:
            body.update(self.extra_body)
        return body

    def __repr__(self) -> str:  # never print the key
        return f"Target({self.base_url}, model={self.model!r}, max_tokens={self.max_tokens}, endpoint={self.endpoint})"


@dataclass(frozen=True)
class LoadSpec:
    """How to load the server: at most `concurrency` requests in flight (None = no cap), arrivals as
    fast as that allows or Poisson at `request_rate` per second, until `max_requests` were sent or
    `duration_s` passed (whichever first; requests in flight then finish). Warm-up requests go first,
    one at a time, and are kept apart from the results."""

    concurrency: int | None = 1
    request_rate: float | None = None
    max_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.max_requests is None and self.duration_s is None:
            raise ValueError("give a budget: max_requests, duration_s or both")
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("give concurrency, request_rate or both")


@dataclass
class RunResult:
    """One load run: what was asked, every request's record, how long it took, and client CPU time."""

    spec: LoadSpec
    target: str
    results: list[RequestResult]
    duration_s: float
    warmup: list[RequestResult]
    started_utc: str
    client_cpu_s: float
    prompt_words: int
    t0_perf: float = 0.0  # time.perf_counter() when the measured part began / ended (lab.measure.gpumon windows)
    t1_perf: float = 0.0
    resources: dict | None = None  # lab.measure.gpumon window of the measured part: peak VRAM, energy, host RSS

    @property
    def output_tokens(self) -> int | None:
        known = [r.output_tokens for r in self.results if r.success and r.output_tokens is not None]
        return sum(known) if known else None

    def to_dict(self) -> dict:
        return {"spec": asdict(self.spec), "target": self.target, "duration_s": self.duration_s,
                "started_utc": self.started_utc, "client_cpu_s": self.client_cpu_s,
                "prompt_words": self.prompt_words, "results": [r.to_dict() for r in self.results],
                "warmup": [r.to_dict() for r in self.warmup], "resources": self.resources}


# ================================================================ prompts
def make_prompts(n: int, words: int, seed: int = 0, tag: str | None = None) -> list[str]:
    """`n` different prompts of `words` words each. Each starts with its own tag and number so no two
    share a prefix (llama-server's prompt cache matches prefixes); the rest is seeded random words."""
    rng = random.Random(seed)
    tag = tag or uuid.uuid4().hex[:8]
    return [f"Request {tag}-{i}: " + " ".join(rng.choice(_WORDS) for _ in range(max(1, words - 2)))
            for i in range(n)]


def count_tokens(base_url: str, text: str, headers: dict | None = None, timeout_s: float = 10.0) -> int | None:
    """Tokens the server's tokenizer makes of `text` (llama-server and vLLM `/tokenize`); None if it has no such route."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, headers=headers or {}) as client:
            reply = client.post(base_url.rstrip("/") + "/tokenize", json={"content": text, "prompt": text})
        data = reply.json()
    except (httpx.HTTPError, ValueError):
        return None
    if reply.status_code != 200:
        return None
    if isinstance(data.get("tokens"), list):
        return len(data["tokens"])
    return data.get("count")


def words_for_tokens(base_url: str, target_tokens: int, headers: dict | None = None) -> tuple[int, float | None]:
    """How many words make a prompt of about `target_tokens` on this server: tokenizes a sample prompt
    and scales. Returns (words, tokens per word); (target_tokens, None) when the server cannot tokenize."""
    sample = make_prompts(1, 200, seed=12345, tag="calibrate")[0]
    n = count_tokens(base_url, sample, headers)
    if not n:
        return target_tokens, None
    per_word = n / 200
    return max(4, round(target_tokens / per_word)), per_word


# ================================================================ measure
def _text_of(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "")


async def stream_request(client: httpx.AsyncClient, target: Target, prompt: str, index: int,
                         run_t0: float) -> RequestResult:
    """Send one streaming request and record it. Never raises (except on cancellation): an HTTP error,
    a dropped connection, a timeout or a malformed stream end as `success=False` with the reason and
    whatever chunks had arrived."""
    res = RequestResult(index)
    sent = time.perf_counter()
    res.start_s = sent - run_t0
    done = False
    try:
        async with client.stream("POST", target.url, json=target.payload(prompt), headers=target.headers()) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                res.error = f"HTTP {resp.status_code}: {body[:300]}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(data)
                except ValueError:
                    res.error = f"malformed chunk: {data[:120]!r}"
                    continue
                if "error" in chunk:
                    res.error = f"server error in stream: {str(chunk['error'])[:300]}"
                    return res
                choices = chunk.get("choices")
                text = _text_of(choices[0]) if choices else ""
                if choices:
                    res.first_choice_s = now - sent if res.first_choice_s is None else res.first_choice_s
                    res.last_choice_s = now - sent
                    res.choice_chunks += 1
                if text:
                    if res.ttft_s is None:
                        res.ttft_s = now - sent
                    res.chunk_times_s.append(now - sent)
                    res.output_chars += len(text)
                usage = chunk.get("usage")
                if usage:
                    res.output_tokens = usage.get("completion_tokens")
                    res.prompt_tokens = usage.get("prompt_tokens")
                    res.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                if chunk.get("timings"):
                    res.server_timings = chunk["timings"]
                    if res.cached_tokens is None:
                        res.cached_tokens = chunk["timings"].get("cache_n")
    except (httpx.HTTPError, OSError, asyncio.TimeoutError) as exc:
        res.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        res.e2el_s = time.perf_counter() - sent
    if res.error is None:
        if not done:
            res.error = "stream ended without [DONE]"
        elif not res.chunk_times_s:
            res.error = "no generated text in the stream"
        else:
            res.success = True
    if res.output_tokens is not None:
        res.tokens_from = "usage"
    elif res.success:  # e.g. a server that ignores stream_options.include_usage: count what arrived, and say so
        res.output_tokens, res.tokens_from = len(res.chunk_times_s), "chunks"
    return res


# ================================================================ orchestrate
def _client(concurrency: int | None, timeout_s: float) -> httpx.AsyncClient:
    n = max(concurrency or 64, 1)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), trust_env=False,
                             limits=httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4))


async def run_load_async(target: Target, prompts: list[str], spec: LoadSpec, on_result=None) -> RunResult:
    """Warm-up, then the load of `spec`. Prompts are used in order, each at most once: give at least
    warmup_requests + max_requests of them (with only a time budget, sending stops when they run out).
    `on_result(result)`, when given, is called as each measured request ends (progress, tests)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cpu0 = time.process_time()
    rng = random.Random(spec.seed)
    queue = list(prompts)
    async with _client(spec.concurrency, target.timeout_s) as client:
        warm = []
        for i in range(min(spec.warmup_requests, len(queue))):
            warm.append(await stream_request(client, target, queue.pop(0), -1 - i, time.perf_counter()))
        sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        t0 = time.perf_counter()
        deadline = t0 + spec.duration_s if spec.duration_s else math.inf
        tasks: list[asyncio.Task] = []

        async def one(i: int, prompt: str) -> RequestResult:
            try:
                res = await stream_request(client, target, prompt, i, t0)
                if on_result is not None:
                    on_result(res)
                return res
            finally:
                if sem:
                    sem.release()

        i = 0
        while queue and (spec.max_requests is None or i < spec.max_requests):
            if spec.request_rate:
                await asyncio.sleep(rng.expovariate(spec.request_rate))  # Poisson arrivals
            if sem:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(sem.acquire(), timeout=None if math.isinf(remaining) else remaining)
                except asyncio.TimeoutError:
                    break
            if time.perf_counter() >= deadline:
                if sem:
                    sem.release()
                break
            tasks.append(asyncio.create_task(one(i, queue.pop(0))))
            i += 1
        results = list(await asyncio.gather(*tasks))
        duration = time.perf_counter() - t0
    return RunResult(spec, repr(target), results, duration, warm, started, time.process_time() - cpu0,
                     len(prompts[0].split()) if prompts else 0, t0, t0 + duration)


def _run_coro(coro):
    """Run a coroutine from plain code or from a Jupyter cell (whose event loop is already running):
    in the latter case on a fresh loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def worker():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=worker, name="lab-bench")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_load(target: Target, prompts: list[str], spec: LoadSpec, on_result=None) -> RunResult:
    """`run_load_async` for plain code and notebook cells alike."""
    return _run_coro(run_load_async(target, prompts, spec, on_result))


def sweep(target: Target, levels: list[int], requests_per_level: int, prompt_words: int,
          duration_s: float | None = None, warmup_requests: int = 1, seed: int = 0, monitor=None) -> list[RunResult]:
    """One run per concurrency level, each with its own fresh prompts (no prefix shared with any other
    run, so the prompt cache cannot help), `requests_per_level` requests or `duration_s`, whichever first.
    `monitor` (a running lab.measure.gpumon.Sampler): each run gets its peak VRAM, energy and host RSS."""
    runs = []
    for k, level in enumerate(levels):
        prompts = make_prompts(warmup_requests + requests_per_level, prompt_words, seed=seed + k)
        spec = LoadSpec(concurrency=level, max_requests=requests_per_level, duration_s=duration_s,
                        warmup_requests=warmup_requests, seed=seed + k)
        run = run_load(target, prompts, spec)
        if monitor is not None:
            run.resources = monitor.window(run.t0_perf, run.t1_perf, run.output_tokens)
        runs.append(run)
    return runs


# ================================================================ summarise (pure)
def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0–100) with linear interpolation (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats_ms(values_s: list[float]) -> dict:
    """mean, p50, p90, p99 in milliseconds, and n; every value None when there is none."""
    if not values_s:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    ms = [v * 1000 for v in values_s]
    return {"mean": sum(ms) / len(ms), "p50": percentile(ms, 50), "p90": percentile(ms, 90),
            "p99": percentile(ms, 99), "n": len(ms)}


@dataclass(frozen=True)
class Criteria:
    """When a run counts: long enough, enough successes, few enough errors."""

    min_duration_s: float = 5.0
    min_successes: int = 4
    max_error_rate: float = 0.05
    max_cached_fraction: float = 0.2  # above this the prompt cache, not the model, made TTFT (a warning)


def tpot_s(r: RequestResult) -> float | None:
    """(E2EL − TTFT) / (output tokens − 1): the mean time per generated token after the first."""
    if not r.success or r.ttft_s is None or r.e2el_s is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.e2el_s - r.ttft_s) / (r.output_tokens - 1)


def meets_slo(r: RequestResult, slo: dict) -> bool:
    """Whether a successful request met every SLO given (ttft_ms, tpot_ms, e2el_ms)."""
    if not r.success:
        return False
    measured = {"ttft_ms": r.ttft_s, "tpot_ms": tpot_s(r), "e2el_ms": r.e2el_s}
    for key, limit in slo.items():
        if key not in measured:
            raise ValueError(f"unknown SLO {key!r}; known: {', '.join(measured)}")
        value = measured[key]
        if value is None or value * 1000 > limit:
            return False
    return True


def validity(summary: dict, criteria: Criteria = Criteria()) -> dict:
    """{"valid": bool, "reasons": [why not, with what to do], "warnings": [...]} for a summary."""
    reasons, warnings = [], []
    if summary["successes"] == 0:
        reasons.append("no request succeeded: read the errors and the server log")
    elif summary["successes"] < criteria.min_successes:
        reasons.append(f"{summary['successes']} successful requests < {criteria.min_successes}: send more requests")
    if summary["duration_s"] < criteria.min_duration_s:
        reasons.append(f"ran {summary['duration_s']:.2f} s < {criteria.min_duration_s:g} s: raise the request or time budget")
    if summary["error_rate"] is not None and summary["error_rate"] > criteria.max_error_rate:
        reasons.append(f"error rate {summary['error_rate']:.0%} > {criteria.max_error_rate:.0%}: "
                       f"{', '.join(summary['errors']) or 'see errors'}")
    cached = summary.get("cached_fraction")
    if cached is not None and cached > criteria.max_cached_fraction:
        warnings.append(f"{cached:.0%} of prompt tokens came from the server's prompt cache: TTFT is too low; "
                        "vary the prompts")
    if summary.get("requests_without_usage"):
        warnings.append(f"{summary['requests_without_usage']} successful request(s) had no usage: their output tokens "
                        "were counted as streamed chunks with text, one token per chunk assumed, and their prompt tokens "
                        "are unknown (the server ignores stream_options.include_usage)")
    return {"valid": not reasons, "reasons": reasons, "warnings": warnings}


def summarise(results: list[RequestResult], duration_s: float, slo: dict | None = None,
              criteria: Criteria = Criteria()) -> dict:
    """The metrics of one run (pure). Latencies in ms; throughputs per second of the run's duration.
    Every metric is None when no request succeeded — never 0, which would read as "measured: zero"."""
    ok = [r for r in results if r.success]
    failed = [r for r in results if not r.success]
    with_usage = [r for r in ok if r.output_tokens is not None]
    by_chunks = [r for r in ok if r.tokens_from == "chunks"]
    n = len(results)
    out_tokens = sum(r.output_tokens for r in with_usage) if with_usage else None
    prompt_known = [r for r in ok if r.prompt_tokens is not None]
    prompt_tokens = sum(r.prompt_tokens for r in prompt_known) if prompt_known else None
    cached_known = [r for r in prompt_known if r.cached_tokens is not None]
    decode = [(r.output_tokens - 1, r.e2el_s - r.ttft_s) for r in with_usage if tpot_s(r) is not None]
    decode_time = sum(t for _, t in decode)
    server_speeds = [r.server_timings["predicted_per_second"] for r in ok
                     if r.server_timings and r.server_timings.get("predicted_per_second")]
    per_s = (lambda x: x / duration_s if x is not None and ok and duration_s > 0 else None)
    summary = {
        "requests": n, "successes": len(ok), "failures": len(failed), "duration_s": duration_s,
        "error_rate": len(failed) / n if n else None,
        "errors": dict(Counter((r.error or "unknown")[:120] for r in failed)),
        "ttft_ms": stats_ms([r.ttft_s for r in ok]),
        "tpot_ms": stats_ms([t for r in ok if (t := tpot_s(r)) is not None]),
        "itl_ms": stats_ms([g for r in ok for g in r.itl_s]),
        "e2el_ms": stats_ms([r.e2el_s for r in ok]),
        "request_throughput": per_s(len(ok)) if ok else None,
        "output_throughput": per_s(out_tokens),
        "total_token_throughput": per_s(out_tokens + prompt_tokens) if out_tokens is not None and prompt_tokens is not None else None,
        "stream_decode_tok_s": sum(k for k, _ in decode) / decode_time if decode and decode_time > 0 else None,
        "server_decode_tok_s": sum(server_speeds) / len(server_speeds) if server_speeds else None,
        "output_tokens_mean": out_tokens / len(with_usage) if with_usage else None,
        "prompt_tokens_mean": prompt_tokens / len(prompt_known) if prompt_known else None,
        "cached_fraction": (sum(r.cached_tokens for r in cached_known) / max(1, sum(r.prompt_tokens for r in cached_known))
                            if cached_known else None),
        "requests_without_usage": len(ok) - len(with_usage) + len(by_chunks),
        "tokens_counted_from": ("chunks" if len(by_chunks) == len(ok) else "usage" if not by_chunks else "usage and chunks")
        if ok else None,
        "goodput": None,
    }
    if slo:
        good = sum(meets_slo(r, slo) for r in results)
        summary["goodput"] = {"slo": dict(slo), "good_requests": good,
                              "goodput_req_s": good / duration_s if ok and duration_s > 0 else None,
                              "fraction": good / n if ok else None}
    summary["validity"] = validity(summary, criteria)
    return summary


def summarise_run(run: RunResult, slo: dict | None = None, criteria: Criteria = Criteria()) -> dict:
    """`summarise` of a RunResult, with its load settings and the client's CPU time."""
    s = summarise(run.results, run.duration_s, slo, criteria)
    s.update(concurrency=run.spec.concurrency, request_rate=run.spec.request_rate, client_cpu_s=run.client_cpu_s)
    res = run.resources or {}
    # None = not measured (no NVML / no sampler), never 0
    s.update(joules_per_token=res.get("joules_per_token"), mean_power_w=res.get("mean_power_w"),
             peak_vram_mib=res.get("peak_vram_mib"), peak_host_rss_mib=res.get("peak_host_rss_mib"),
             energy_not_measured=res.get("gpu_not_measured") if res else "no sampler ran")
    return s


# A server that runs one request at a time makes each new request wait for those ahead of it: at
# concurrency c (closed loop) the median TTFT grows by about (c − 1) × one request's end-to-end time,
# and the total throughput stays where one stream had it. Ollama does this when OLLAMA_NUM_PARALLEL is 1
# (https://docs.ollama.com/faq "How does Ollama handle concurrent requests?"), llama-server with -np 1.
QUEUED_WAIT_FRACTION = 0.5  # extra TTFT ≥ half the serial wait ...
QUEUED_MAX_GAIN = 1.25  # ... and throughput < 1.25 × one stream's: the server queues


def queueing(summaries: list[dict]) -> list[dict]:
    """Per concurrency level, whether the server queued requests instead of batching them (pure).

    extra_wait_ms = TTFT p50 at this level − at concurrency 1; serial_wait_ms = (c − 1) × E2EL p50 at
    concurrency 1 (what a one-at-a-time server adds); throughput_gain = output tok/s ÷ concurrency 1's."""
    base = next((s for s in summaries if s.get("concurrency") == 1 and s["successes"]), None)
    rows = []
    for s in summaries:
        c = s.get("concurrency")
        row = {"concurrency": c, "ttft_p50_ms": s["ttft_ms"]["p50"], "extra_wait_ms": None, "serial_wait_ms": None,
               "wait_vs_serial": None, "throughput_gain": None, "queued": None}
        if base and c and c > 1 and s["ttft_ms"]["p50"] is not None and base["e2el_ms"]["p50"]:
            row["extra_wait_ms"] = s["ttft_ms"]["p50"] - base["ttft_ms"]["p50"]
            row["serial_wait_ms"] = (c - 1) * base["e2el_ms"]["p50"]
            row["wait_vs_serial"] = row["extra_wait_ms"] / row["serial_wait_ms"]
            if s["output_throughput"] and base["output_throughput"]:
                row["throughput_gain"] = s["output_throughput"] / base["output_throughput"]
            row["queued"] = (row["wait_vs_serial"] >= QUEUED_WAIT_FRACTION and row["throughput_gain"] is not None
                             and row["throughput_gain"] < QUEUED_MAX_GAIN)
        rows.append(row)
    return rows


# ================================================================ in-process speed: llama-bench
def _bench_stats(row: dict) -> dict:
    return {"test": row["test"], "n_prompt": row.get("n_prompt"), "n_gen": row.get("n_gen"),
            "n_depth": row.get("n_depth"), "tok_s_mean": row.get("avg_ts"), "tok_s_sd": row.get("stddev_ts"),
            "samples_tok_s": row.get("samples_ts"), "samples_ns": row.get("samples_ns")}


def llama_bench(model: str | Path, threads: int, n_prompt: int, n_gen: int, depth: int = 0, reps: int = 3,
                n_gpu_layers: int | None = None, flash_attn: str | None = None, extra_args: tuple = (),
                timeout_s: float = 600, env: dict[str, str] | None = None) -> dict:
    """Run the real `llama-bench -o json` for pp<n_prompt> and tg<n_gen> at context depth `depth`.

    Returns {"command", "pp": {...}, "tg": {...}, "rows" (llama-bench's own JSON: build, CPU/GPU,
    every setting), "duration_s"}; pp/tg hold mean ± sample sd and the raw per-repetition samples.
    `env` is added to this process's environment (e.g. CUDA_VISIBLE_DEVICES for a one-GPU run).
    Raises RuntimeError with llama-bench's stderr tail when it fails."""
    from lab.core import paths

    cmd = [str(paths.tool("llama-bench")), "-m", str(model), "-t", str(threads), "-p", str(n_prompt),
           "-n", str(n_gen), "-d", str(depth), "-r", str(reps), "-o", "json"]
    if n_gpu_layers is not None:
        cmd += ["-ngl", str(99 if n_gpu_layers < 0 else n_gpu_layers)]
    if flash_attn is not None:
        cmd += ["-fa", flash_attn]
    cmd += [str(a) for a in extra_args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **env} if env else None)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench exited {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    rows = json.loads(proc.stdout)
    for row in rows:
        d = f"@d{row.get('n_depth')}" if row.get("n_depth") else ""
        row["test"] = f"pp{row['n_prompt']}{d}" if row.get("n_gen") == 0 else f"tg{row['n_gen']}{d}"
    pp = next((r for r in rows if r.get("n_prompt") and not r.get("n_gen")), None)
    tg = next((r for r in rows if r.get("n_gen") and not r.get("n_prompt")), None)
    return {"command": cmd, "env": dict(env or {}), "pp": _bench_stats(pp) if pp else None,
            "tg": _bench_stats(tg) if tg else None, "rows": rows, "duration_s": time.perf_counter() - t0}


def in_process_for(profile, depth: int, reps: int = 3) -> tuple[dict | None, str | None]:
    """llama-bench for the profile's own model, threads and GPU layers, at pp<bench_prompt_tokens> and
    tg<bench_output_tokens> at context depth `depth`; (None, why) when this machine cannot run it."""
    from lab.core import evidence, paths

    if profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return None, f"llama-bench measures llama.cpp only; this profile serves with {profile.engine}"
    if profile.endpoint_url:
        from lab.serving.endpoint import is_loopback

        if not is_loopback(profile.endpoint_url):
            return None, (f"the server runs on another machine ({profile.endpoint_url}): llama-bench there "
                          "(same model file and threads) gives its in-process speed")
        if not profile.model_file:
            return None, "endpoint profile without model_file: the lab does not know which file the server loaded"
    if profile.gpu_count > 0 and len(evidence.gpu_summary()["gpus"]) < profile.gpu_count:
        return None, f"profile {profile.name} needs {profile.gpu_count} GPU(s); this machine has fewer"
    try:
        model = paths.model_path(profile.model_file) if profile.model_file else None
        tool = paths.tool("llama-bench")
    except Exception as exc:
        return None, str(exc)
    if model is None or not model.is_file():
        return None, f"model file {model} not found"
    del tool  # located above only to give a clear reason when set-up has not built it
    result = llama_bench(model, profile.threads, profile.bench_prompt_tokens, profile.bench_output_tokens, depth, reps,
                         n_gpu_layers=profile.n_gpu_layers if profile.gpu_count > 0 else None)
    return result, None


def served_cost_s() -> tuple[float, str]:
    """llama-server's fixed per-token cost (seconds) — the largest measured in lab/data/served_overhead.yaml —
    and where it was measured."""
    from lab.core import facts

    rows = facts.load("served_overhead", "measurements")["measurements"]
    worst = max(rows, key=lambda r: 1 / r["served_tok_s"] - 1 / r["in_process_tok_s"])
    return 1 / worst["served_tok_s"] - 1 / worst["in_process_tok_s"], worst["source"].strip()


def reachable_ratio(in_process_tok_s: float | None) -> float | None:
    """The best served ÷ in-process a server with that fixed per-token cost can reach at this speed."""
    if not in_process_tok_s:
        return None
    return 1 / (1 + served_cost_s()[0] * in_process_tok_s)


def max_tok_s_for_target() -> float:
    """The fastest in-process decode at which served ÷ in-process can still reach the target:
    1 / (1 + c × tg) ≥ T  ⇔  tg ≤ (1/T − 1) / c."""
    return (1 / SERVED_RATIO_TARGET - 1) / served_cost_s()[0]


def served_gap_markdown(single: dict | None, in_process_tok_s: float | None) -> str:
    """The served ÷ in-process paragraph of notebook 06, from this run's numbers (never typed in)."""
    if not single or not in_process_tok_s:
        return "Not measured here: it needs both a served single stream and llama-bench."
    client, server = single.get("stream_decode_tok_s"), single.get("server_decode_tok_s")
    cost, _ = served_cost_s()
    reach = reachable_ratio(in_process_tok_s)
    lines = [f"In this run: client-measured **{_f(client)}** tok/s, server-reported **{_f(server)}** tok/s, "
             f"llama-bench **{_f(in_process_tok_s)}** tok/s — served ÷ in-process **{_f(served_ratio(client, in_process_tok_s), 3)}**."]
    if client and server:
        cost_pct = 100 * (1 - client / server)
        lines.append((f"The client and HTTP path cost {_f(cost_pct)} % (client vs server-reported)" if cost_pct >= 0.5
                      else "The client and HTTP path cost nothing measurable (client ≈ server-reported)")
                     + "; the rest of any gap is inside llama-server or taken by other work on the machine.")
    lines.append(f"llama-server spends a fixed ≈ {cost * 1e3:.2f} ms per token outside the compute graph (measured, "
                 f"lab/data/served_overhead.yaml), so at {_f(in_process_tok_s)} tok/s the best reachable ratio is "
                 f"1 ÷ (1 + {cost * 1e3:.2f} ms × {_f(in_process_tok_s)} tok/s) = **{_f(reach, 3)}**"
                 + (f" — the ≥ {SERVED_RATIO_TARGET} target applies." if reach >= SERVED_RATIO_TARGET else
                    f" — below the {SERVED_RATIO_TARGET} target, which applies only to models slower than "
                    f"{_f(max_tok_s_for_target())} tok/s (a 27B-class model on a V100, for one)."))
    return " ".join(lines)


def _f(x, nd: int = 1) -> str:
    from lab.core.display import sig3

    return "unknown" if x is None else sig3(x)


def served_ratio(served_tok_s: float | None, in_process_tok_s: float | None) -> float | None:
    """Served single-stream decode speed ÷ llama-bench tg for the same model and threads (target ≥ 0.95)."""
    if served_tok_s is None or not in_process_tok_s:
        return None
    return served_tok_s / in_process_tok_s


# ================================================================ the client's own capacity
def client_capacity(streams: int = 64, tokens_per_stream: int = 200, paced_interval_ms: float = 20.0,
                    paced_tokens: int = 50) -> dict:
    """How much load this client can generate and time, against lab.measure.bench_source (a local SSE server
    in its own process, sending OpenAI-style chunks): `streams` concurrent streams flat out (parsed
    tok/s, client CPU seconds per 1000 tokens), then paced at one chunk every `paced_interval_ms` per
    stream (the ITL the client measured minus the gap between the source's own sends, chunk by chunk =
    what the client and the socket add). Targets: ≥ 64 streams, ≥ 5,000 tok/s parsed on one core,
    ≤ 1 ms added to ITL."""
    from lab.measure import bench_source

    out = {"streams": streams, "tokens_per_stream": tokens_per_stream, "paced_interval_ms": paced_interval_ms}
    with bench_source.running() as base_url:
        for mode, interval, tokens in (("flat_out", 0.0, tokens_per_stream), ("paced", paced_interval_ms, paced_tokens)):
            target = Target(f"{base_url}/i{interval:g}", model="source", max_tokens=tokens, ignore_eos=False)
            prompts = make_prompts(streams + 1, 4, seed=1)
            run = run_load(target, prompts, LoadSpec(concurrency=streams, max_requests=streams, warmup_requests=1))
            s = summarise(run.results, run.duration_s)
            tokens_done = sum(r.output_tokens or 0 for r in run.results if r.success)
            out[mode] = {"successes": s["successes"], "failures": s["failures"], "duration_s": run.duration_s,
                         "tokens": tokens_done, "parsed_tok_s": tokens_done / run.duration_s if run.duration_s else None,
                         "client_cpu_s": run.client_cpu_s,
                         "client_cpu_ms_per_1000_tok": 1e6 * run.client_cpu_s / tokens_done if tokens_done else None,
                         "tok_per_client_cpu_s": tokens_done / run.client_cpu_s if run.client_cpu_s else None,
                         "itl_ms": s["itl_ms"], "errors": s["errors"]}
            if mode == "paced":  # client ITL minus the source's own send gap, chunk by chunk
                added = [itl * 1000 - gap for r in run.results if r.success and r.server_timings
                         for itl, gap in zip(r.itl_s, r.server_timings.get("send_gaps_ms") or [])]
                out["added_itl_ms"] = {"mean": sum(added) / len(added) if added else None,
                                       "p50": percentile(added, 50), "p99": percentile(added, 99),
                                       "max": max(added) if added else None, "n": len(added)}
    out["added_itl_ms_mean"] = out["added_itl_ms"]["mean"]
    out["added_itl_ms_p99"] = out["added_itl_ms"]["p99"]
    out["targets"] = {"streams": 64, "tok_per_client_cpu_s": 5000, "added_itl_ms": 1.0}
    flat = out["flat_out"]
    out["meets_targets"] = (flat["successes"] >= 64 and (flat["tok_per_client_cpu_s"] or 0) >= 5000
                            and out["added_itl_ms_mean"] is not None and out["added_itl_ms_mean"] <= 1.0)
    return out


# ================================================================ show
def summary_row(summary: dict) -> dict:
    """One flat table row of a run's summary (ms and tok/s, rounded for reading)."""
    def r(x, nd=1):
        return None if x is None else round(x, nd)

    v = summary["validity"]
    return {"concurrency": summary.get("concurrency"), "requests": summary["requests"], "ok": summary["successes"],
            "errors": summary["failures"], "duration_s": r(summary["duration_s"], 2),
            "output_tok_s": r(summary["output_throughput"]), "stream_decode_tok_s": r(summary["stream_decode_tok_s"]),
            "server_decode_tok_s": r(summary["server_decode_tok_s"]),
            "ttft_p50_ms": r(summary["ttft_ms"]["p50"]), "ttft_p99_ms": r(summary["ttft_ms"]["p99"]),
            "tpot_p50_ms": r(summary["tpot_ms"]["p50"]), "itl_p50_ms": r(summary["itl_ms"]["p50"]),
            "itl_p99_ms": r(summary["itl_ms"]["p99"]), "e2el_p50_ms": r(summary["e2el_ms"]["p50"]),
            "prompt_tokens": r(summary["prompt_tokens_mean"]), "cached": r(summary["cached_fraction"], 3),
            "joules_per_token": r(summary.get("joules_per_token"), 4),
            "peak_vram_mib": None if summary.get("peak_vram_mib") is None else [round(x) for x in summary["peak_vram_mib"] if x is not None],
            "peak_host_rss_mib": r(summary.get("peak_host_rss_mib"), 0),
            "valid": v["valid"], "why_not": "; ".join(v["reasons"] + v["warnings"])}


def sweep_frame(summaries: list[dict]):
    import pandas as pd

    return pd.DataFrame([summary_row(s) for s in summaries])


def requests_frame(run: RunResult):
    """Every request of a run: start, TTFT, E2EL, tokens, error — for a closer look."""
    import pandas as pd

    return pd.DataFrame([{"index": r.index, "success": r.success, "start_s": r.start_s, "ttft_s": r.ttft_s,
                          "e2el_s": r.e2el_s, "chunks": len(r.chunk_times_s), "output_tokens": r.output_tokens,
                          "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens, "error": r.error}
                         for r in run.results])


def sweep_chart(summaries: list[dict], ceilings: list[dict] | None = None, predicted_single: float | None = None,
                title: str = "Throughput and latency by concurrency"):
    """Two panels: output tok/s (measured aggregate, and the roofline's aggregate ceiling when known)
    and latency (TTFT p50, TPOT p50, E2EL p50) against concurrency."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    xs = [s.get("concurrency") for s in summaries]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("output tokens per second (all streams)", "latency, p50 (ms)"))
    fig.add_trace(go.Scatter(x=xs, y=[s["output_throughput"] for s in summaries], mode="lines+markers",
                             name="measured (served)"), row=1, col=1)
    fig.add_trace(go.Scatter(x=xs, y=[s["stream_decode_tok_s"] for s in summaries], mode="lines+markers",
                             name="per-stream decode", line={"dash": "dot"}), row=1, col=1)
    if ceilings:
        fig.add_trace(go.Scatter(x=[c["concurrency"] for c in ceilings], y=[c["aggregate_ceiling_tok_s"] for c in ceilings],
                                 mode="lines+markers", name="roofline ceiling", line={"dash": "dash"}), row=1, col=1)
    if predicted_single is not None:
        fig.add_trace(go.Scatter(x=[1], y=[predicted_single], mode="markers", marker={"symbol": "x", "size": 11},
                                 name="calibrated prediction (1 stream)"), row=1, col=1)
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2el_ms", "E2E latency")):
        fig.add_trace(go.Scatter(x=xs, y=[s[key]["p50"] for s in summaries], mode="lines+markers", name=name),
                      row=1, col=2)
    ticks = xs or [c["concurrency"] for c in ceilings or []]
    fig.update_xaxes(title_text="concurrent streams", type="log", tickvals=ticks)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title=title, height=420)
    return fig


def energy_chart(summaries: list[dict], title: str = "Energy and memory by concurrency"):
    """Joules per output token and peak VRAM (all GPUs) against concurrency; on a machine where NVML measured
    nothing the chart says "not measured" instead of drawing zeros."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    xs = [s.get("concurrency") for s in summaries]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("joules per output token (GPU)", "peak memory (MiB)"))
    jpt = [s.get("joules_per_token") for s in summaries]
    vram = [sum(v for v in s["peak_vram_mib"] if v is not None) if s.get("peak_vram_mib") else None for s in summaries]
    rss = [s.get("peak_host_rss_mib") for s in summaries]
    fig.add_trace(go.Scatter(x=xs, y=jpt, mode="lines+markers", name="J / token"), row=1, col=1)
    fig.add_trace(go.Scatter(x=xs, y=vram, mode="lines+markers", name="peak VRAM, all GPUs"), row=1, col=2)
    fig.add_trace(go.Scatter(x=xs, y=rss, mode="lines+markers", name="peak host RSS, server tree"), row=1, col=2)
    if all(v is None for v in jpt):
        why = next((s.get("energy_not_measured") for s in summaries if s.get("energy_not_measured")), "no GPU")
        fig.add_annotation(text=f"GPU energy not measured: {why}"[:90], xref="x domain", yref="y domain", x=0.5, y=0.5,
                           showarrow=False, row=1, col=1)
    fig.update_xaxes(title_text="concurrent streams", type="log", tickvals=xs)
    fig.update_layout(title=title, height=380)
    return fig


# ================================================================ was the machine quiet?
def cpu_snapshot(server_pid: int | None = None) -> dict:
    """CPU seconds so far: the whole machine's busy time, this process's, and the server's (with its
    children). Two snapshots around a run tell how much *other* work shared the cores (`contention`)."""
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)
    server = None
    if server_pid:
        try:
            proc = psutil.Process(server_pid)
            c = proc.cpu_times()
            server = c.user + c.system + c.children_user + c.children_system  # children_*: exited ones only
            # live children count too: vLLM's API server does little itself, its EngineCore and worker decode
            for child in proc.children(recursive=True):
                try:
                    cc = child.cpu_times()
                    server += cc.user + cc.system
                except psutil.Error:
                    pass
        except psutil.Error:
            server = None
    return {"wall": time.monotonic(), "machine_busy_s": busy, "client_s": time.process_time(), "server_s": server,
            "cpus": psutil.cpu_count()}


def contention(before: dict, after: dict) -> dict:
    """CPU time used by processes other than this client and the server between two snapshots, as
    cores' worth of work: on a 2-core box, 0.5 means a quarter of the machine was busy with something else."""
    wall = after["wall"] - before["wall"]
    machine = after["machine_busy_s"] - before["machine_busy_s"]
    client = after["client_s"] - before["client_s"]
    server = (after["server_s"] - before["server_s"]) if after["server_s"] is not None and before["server_s"] is not None else None
    others = machine - client - (server or 0)
    return {"wall_s": wall, "cpus": after["cpus"], "machine_busy_s": machine, "client_s": client, "server_s": server,
            "others_s": max(others, 0.0), "others_cores": max(others, 0.0) / wall if wall > 0 else None}


# ================================================================ notebook 06: checks, record, advice
# Interactive use: the first token within 2 s, then at least 10 tokens/s per stream (faster than reading).
DEFAULT_SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0}
SERVED_RATIO_TARGET = 0.95


def criteria_for(profile) -> Criteria:
    """Validity criteria that the profile's own benchmark plan can meet (small plans, small minimums)."""
    return Criteria(min_duration_s=3.0, min_successes=min(4, profile.bench_requests), max_error_rate=0.05)


def bench_checks(summaries: list[dict], ratio: float | None, ceiling_tok_s: float | None,
                 capacity: dict | None, skip_reason: str | None = None, busy: dict | None = None,
                 queue: list[dict] | None = None) -> list:
    """The benchmark's verdicts as lab.core.checks.Check: each run valid, served ≈ in-process, measured
    below the roofline, and the client fast enough to measure what it measures."""
    from lab.core.checks import Check

    out = []
    if skip_reason:
        out.append(Check("benchmark ran", "skip", "skipped", "a server to measure", skip_reason))
    for s in summaries:
        v = s["validity"]
        out.append(Check(f"run at concurrency {s.get('concurrency')} valid", "pass" if v["valid"] and not v["warnings"]
                         else ("warn" if v["valid"] else "fail"),
                         f"{s['successes']}/{s['requests']} ok in {s['duration_s']:.1f} s", "valid run",
                         "; ".join(v["reasons"] + v["warnings"]), "lab.measure.bench.validity (MLPerf-loadgen style)"))
    if busy and busy.get("others_cores") is not None:
        quiet = busy["others_cores"] <= 0.1
        out.append(Check("machine quiet during the sweep", "pass" if quiet else "warn",
                         f"{busy['others_cores']:.2f} cores of other work", "≤ 0.10 cores",
                         "" if quiet else f"other processes used {busy['others_s']:.1f} CPU s during the "
                         f"{busy['wall_s']:.0f} s sweep on {busy['cpus']} cores: every speed here is lower than this "
                         "machine can do; rerun when it is idle", "lab.measure.bench.contention (psutil CPU times)"))
    for q in queue or []:
        if q["queued"] is None:
            continue
        out.append(Check(f"concurrency {q['concurrency']}: requests batched, not queued", "warn" if q["queued"] else "pass",
                         f"TTFT +{q['extra_wait_ms']:.0f} ms (serial server: +{q['serial_wait_ms']:.0f} ms); "
                         f"throughput ×{q['throughput_gain']:.2f}",
                         f"extra TTFT < {QUEUED_WAIT_FRACTION:g} × serial wait, or throughput ≥ ×{QUEUED_MAX_GAIN:g}",
                         "" if not q["queued"] else "the server runs one request at a time: concurrent users wait in line. "
                         "Ollama: OLLAMA_NUM_PARALLEL=4 ollama serve; llama-server: -np 4 (each slot gets -c ÷ np tokens); "
                         "vLLM batches by default (--max-num-seqs)",
                         "lab.measure.bench.queueing; https://docs.ollama.com/faq (concurrent requests, OLLAMA_NUM_PARALLEL)"))
    single = summaries[0]["stream_decode_tok_s"] if summaries else None
    tg = single / ratio if single and ratio else None
    reach = reachable_ratio(tg)
    cost, cost_source = served_cost_s()
    if ratio is None:
        out.append(Check("served ÷ in-process decode", "skip", "unknown", f"≥ {SERVED_RATIO_TARGET}",
                         "needs both a served single stream and llama-bench", "lab.measure.bench.served_ratio"))
    elif reach < SERVED_RATIO_TARGET:
        out.append(Check("served ÷ in-process decode", "skip", round(ratio, 3), f"≥ {SERVED_RATIO_TARGET} (not reachable here)",
                         f"the target does not apply to a model this fast: llama-server's fixed ≈ {cost * 1e3:.2f} ms per "
                         f"token caps the ratio at {reach:.2f} at {tg:.0f} tok/s in-process; it applies below "
                         f"{max_tok_s_for_target():.0f} tok/s (a 27B on a V100)",
                         f"lab/data/served_overhead.yaml: {cost_source}"))
    else:
        out.append(Check("served ÷ in-process decode", "pass" if ratio >= SERVED_RATIO_TARGET else "warn",
                         round(ratio, 3), f"≥ {SERVED_RATIO_TARGET}",
                         "" if ratio >= SERVED_RATIO_TARGET else
                         "compare the server-reported decode speed (timings): when it equals the client's, the gap is "
                         "inside llama-server, not HTTP or this client; other work on the machine lowers it too "
                         "(see 'machine quiet during the sweep')", f"lab/data/served_overhead.yaml: {cost_source}"))
    if single is not None and ceiling_tok_s is not None:
        out.append(Check("single-stream decode ≤ roofline", "pass" if single <= ceiling_tok_s else "fail",
                         round(single, 1), f"≤ {ceiling_tok_s:.1f} tok/s",
                         "" if single <= ceiling_tok_s else "faster than memory allows: the bandwidth or the bytes per "
                         "token used for the ceiling are wrong (is part of the model in a cache?)",
                         "lab.predict.roofline (decode reads every weight once per token: bandwidth ÷ bytes per token)"))
    if capacity:
        flat = capacity["flat_out"]
        for name, got, want, ok in (
                ("client: concurrent streams", flat["successes"], "≥ 64", flat["successes"] >= 64),
                ("client: tokens parsed per CPU second", round(flat["tok_per_client_cpu_s"] or 0),
                 "≥ 5000", (flat["tok_per_client_cpu_s"] or 0) >= 5000),
                ("client: added inter-token latency", None if capacity["added_itl_ms_mean"] is None
                 else round(capacity["added_itl_ms_mean"], 3), "≤ 1 ms (mean)",
                 capacity["added_itl_ms_mean"] is not None and capacity["added_itl_ms_mean"] <= 1.0)):
            out.append(Check(name, "pass" if ok else "warn", got, want,
                             "" if ok else "the client may limit what it measures: fewer streams, or a client on "
                             "another machine", "lab.measure.bench.client_capacity against lab.measure.bench_source"))
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


def build_record(profile, *, runs: list[RunResult], summaries: list[dict], llama_bench_result: dict | None,
                 roofline_result: dict, capacity: dict | None, verdicts: list, found: list, charts: list,
                 skip_reason: str | None, llama_bench_skip: str | None, server: dict | None, busy: dict | None = None,
                 peer: dict | None = None, queue: list[dict] | None = None,
                 resources: dict | None = None) -> dict:
    """The 06_benchmark record: summary, checks, tables, charts, every request, the sweep's summaries,
    llama-bench's rows, the roofline, the client's capacity, the claims' verdicts and (vLLM profiles) the
    peer check against `vllm bench serve` (lab.measure.peer_bench)."""
    from lab.core import evidence

    single = summaries[0] if summaries else None
    tg = (llama_bench_result or {}).get("tg") or {}
    served = single["stream_decode_tok_s"] if single else None
    ratio = served_ratio(served, tg.get("tok_s_mean"))
    best = max(summaries, key=lambda s: s["output_throughput"] or 0) if summaries else None
    counts = {v: sum(x.verdict == v for x in verdicts) for v in dict.fromkeys(x.verdict for x in verdicts)}
    summary = {
        "served_single_stream_decode_tok_s": served,
        "server_reported_decode_tok_s": single["server_decode_tok_s"] if single else None,
        "llama_bench_tg_tok_s": tg.get("tok_s_mean"), "llama_bench_test": tg.get("test"),
        "served_over_in_process": ratio,
        "decode_ceiling_tok_s": roofline_result.get("decode_ceiling_tok_s"),
        "predicted_decode_tok_s": roofline_result.get("predicted_decode_tok_s"),
        "served_fraction_of_ceiling": (served / roofline_result["decode_ceiling_tok_s"]
                                       if served and roofline_result.get("decode_ceiling_tok_s") else None),
        "best_aggregate_tok_s": best["output_throughput"] if best else None,
        "best_aggregate_concurrency": best.get("concurrency") if best else None,
        "ttft_p50_ms_single": single["ttft_ms"]["p50"] if single else None,
        "client_parsed_tok_per_cpu_s": capacity["flat_out"]["tok_per_client_cpu_s"] if capacity else None,
        "client_added_itl_ms": capacity["added_itl_ms_mean"] if capacity else None,
        "claims": counts, "benchmark_skipped": skip_reason, "llama_bench_skipped": llama_bench_skip,
        "other_work_cores_during_sweep": busy.get("others_cores") if busy else None,
        "queued_at_concurrency": [q["concurrency"] for q in queue or [] if q["queued"]],
        "tokens_counted_from": sorted({x["tokens_counted_from"] for x in summaries if x.get("tokens_counted_from")}),
        "joules_per_token_single": single.get("joules_per_token") if single else None,
        "joules_per_token_best_aggregate": best.get("joules_per_token") if best else None,
        "peak_vram_mib_load": ((resources or {}).get("load") or {}).get("peak_vram_mib"),
        "peak_vram_mib_sweep": max((sum(v for v in s["peak_vram_mib"] if v is not None) for s in summaries
                                    if s.get("peak_vram_mib")), default=None),
        "peak_host_rss_mib_sweep": max((s["peak_host_rss_mib"] for s in summaries if s.get("peak_host_rss_mib")), default=None),
        "energy_not_measured": single.get("energy_not_measured") if single else None,
    }
    tables = [evidence.table_entry("Sweep by concurrency", [summary_row(s) for s in summaries]),
              evidence.table_entry("Roofline inputs and outputs", roofline_rows(roofline_result)),
              evidence.table_entry("Claims ledger", [v.row() for v in verdicts])]
    if queue:
        tables.insert(1, evidence.table_entry("Queued or batched: TTFT growth by concurrency", queue))
    if llama_bench_result:
        tables.insert(1, evidence.table_entry("llama-bench (in-process)", llama_bench_rows(llama_bench_result)))
    if capacity:
        tables.append(evidence.table_entry("Client capacity", capacity_rows(capacity)))
    if resources:
        from lab.measure import gpumon

        windows = {"model load (server start → healthy)": resources.get("load")}
        windows.update({f"{s.get('concurrency')} streams": r.resources for s, r in zip(summaries, runs)})
        tables.append(evidence.table_entry("Memory and energy (NVML sampler + psutil)", gpumon.rows(windows)))
    if peer is not None:
        summary["peer_check"] = peer_summary(peer)
        if peer["rows"]:
            tables += [evidence.table_entry("Peer check: lab client vs vllm bench serve (same server, same load)", peer["rows"]),
                       evidence.table_entry("Peer check: where the definitions differ", peer["definitions"])]
    return {"title": "Benchmark: served and in-process speed, the roofline, and the seeds' claims",
            "summary": summary, "checks": [c.to_dict() for c in found], "tables": tables, "charts": charts,
            "runs": [r.to_dict() for r in runs], "sweep": summaries, "llama_bench": llama_bench_result,
            "roofline": roofline_result, "client_capacity": capacity,
            "claims": [v.to_dict() for v in verdicts], "server": server, "contention": busy, "peer_check": peer,
            "queueing": queue, "resources": resources}


def roofline_rows(rl: dict) -> list[dict]:
    """The roofline's inputs and results as (quantity, value, where it comes from) rows."""
    def gb(x):
        return None if x is None else round(x / 1e9, 4)

    return [
        {"quantity": "bandwidth (GB/s)", "value": rl.get("bandwidth_gb_s"), "from": rl.get("bandwidth_source") or rl.get("reason")},
        {"quantity": "weights read per token (GB)", "value": gb(rl.get("weights_bytes")), "from": rl.get("weights_how")},
        {"quantity": f"KV read per token at {rl.get('context_tokens')} tokens (GB)", "value": gb(rl.get("kv_bytes_per_seq")),
         "from": "lab.predict.kvcache"},
        {"quantity": "decode ceiling, one stream (tok/s)", "value": rl.get("decode_ceiling_tok_s"), "from": "bandwidth ÷ bytes per token"},
        {"quantity": "efficiency (calibrated)", "value": rl.get("efficiency"), "from": rl.get("calibration_id")},
        {"quantity": "predicted decode, one stream (tok/s)", "value": rl.get("predicted_decode_tok_s"),
         "from": "ceiling × efficiency"},
    ]


def llama_bench_rows(result: dict) -> list[dict]:
    return [{"test": r["test"], "tok_s_mean": r["tok_s_mean"], "tok_s_sd": r["tok_s_sd"],
             "samples_tok_s": r["samples_tok_s"]} for r in (result.get("pp"), result.get("tg")) if r]


def capacity_rows(capacity: dict) -> list[dict]:
    flat, paced = capacity["flat_out"], capacity["paced"]
    return [{"measure": "concurrent streams served", "value": flat["successes"], "target": "≥ 64"},
            {"measure": "tokens parsed per second (flat out)", "value": flat["parsed_tok_s"], "target": ""},
            {"measure": "tokens parsed per client CPU second", "value": flat["tok_per_client_cpu_s"], "target": "≥ 5000"},
            {"measure": f"ITL mean at {capacity['paced_interval_ms']:g} ms pacing (ms)", "value": paced["itl_ms"]["mean"],
             "target": f"{capacity['paced_interval_ms']:g}"},
            {"measure": "added ITL, mean (ms): client ITL − source send gap", "value": capacity["added_itl_ms_mean"],
             "target": "≤ 1"},
            {"measure": "added ITL, p50 (ms)", "value": capacity["added_itl_ms"]["p50"], "target": ""},
            {"measure": "added ITL, p99 (ms)", "value": capacity["added_itl_ms_p99"], "target": ""}]


def what_this_means(record: dict) -> str:
    """What the benchmark means for the reader, from the record alone (Markdown, one point per line)."""
    s = record["summary"]
    lines = []
    if s["benchmark_skipped"]:
        lines.append(f"No server was measured here: {s['benchmark_skipped']}")
    else:
        lines.append(f"One stream decoded at **{_f(s['served_single_stream_decode_tok_s'])} tok/s** through the server "
                     f"(llama-bench in-process: {_f(s['llama_bench_tg_tok_s'])} tok/s; ratio "
                     f"{_f(s['served_over_in_process'])}). The first token took {_f(s['ttft_p50_ms_single'])} ms (p50).")
        lines.append(_batching_sentence(record.get("sweep") or []))
    if s["decode_ceiling_tok_s"] is not None:
        lines.append(f"The memory-bandwidth ceiling for one stream of this model here is {_f(s['decode_ceiling_tok_s'])} tok/s; "
                     f"the calibrated prediction is {_f(s['predicted_decode_tok_s'])} tok/s. No engine beats the ceiling.")
    peer = s.get("peer_check")
    if peer and not peer["skipped"] and peer["metrics_judged"]:
        (lab_tok, vllm_tok) = peer["output_tok_s_lab_vs_vllm"]
        lines.append(f"Peer check: on the same server and load, the lab's client and `vllm bench serve` agree on "
                     f"{peer['metrics_agreeing']} of {peer['metrics_judged']} metrics within the noise "
                     f"(output {lab_tok} vs {vllm_tok} tok/s), so the sweep above measures the server, not the client.")
    elif peer and peer["skipped"] is None:
        lines.append("Peer check: `vllm bench serve` did not produce a result; see the checks.")
    if s.get("queued_at_concurrency"):
        lines.append(f"The server queued requests at concurrency {', '.join(map(str, s['queued_at_concurrency']))}: the "
                     "first token waited for the requests ahead of it and the total did not grow, so it serves one "
                     "request at a time (Ollama: raise OLLAMA_NUM_PARALLEL; llama-server: -np).")
    if "chunks" in " ".join(s.get("tokens_counted_from") or []):
        lines.append("The server sent no token usage in its stream: output tokens were counted as chunks (one token each).")
    if (s.get("other_work_cores_during_sweep") or 0) > 0.1:
        lines.append(f"Other processes kept {s['other_work_cores_during_sweep']:.2f} cores busy during the sweep: "
                     "the served numbers are lower than this machine can do when idle.")
    c = s["claims"]
    lines.append("Seed claims: " + ", ".join(f"{n} {v}" for v, n in c.items()) + ".")
    return "\n".join(f"- {line}" for line in lines)


def _batching_sentence(sweep: list[dict]) -> str:
    """Batching compared like with like: output tokens per second over the whole run (prefill included) at
    one stream and at the best concurrency — never one stream's decode-only speed against a total."""
    runs = [x for x in sweep if x.get("output_throughput")]
    if not runs:
        return "No concurrency sweep result to compare."
    one = next((x for x in runs if x.get("concurrency") == 1), None)
    best = max(runs, key=lambda x: x["output_throughput"])
    if one is None or best is one:
        return (f"Batching did not raise the total output here: {_f(runs[0]['output_throughput'])} tok/s at one stream "
                f"is the highest of the sweep ({', '.join(str(x.get('concurrency')) for x in runs)} streams).")
    per_stream = best["output_throughput"] / best["concurrency"]
    return (f"Batching: output over the whole run (prefill included) went from {_f(one['output_throughput'])} tok/s at "
            f"one stream to **{_f(best['output_throughput'])} tok/s in total at {best['concurrency']} streams** "
            f"(× {_f(best['output_throughput'] / one['output_throughput'])}), each stream getting {_f(per_stream)} tok/s — "
            "that total, not one stream's speed, is the kind of number the seeds' \"280 tok/s\" can only be.")


__all__ = ["RequestResult", "Target", "LoadSpec", "RunResult", "Criteria", "make_prompts", "count_tokens",
           "words_for_tokens", "stream_request", "queueing", "run_load_async", "run_load", "sweep", "percentile", "stats_ms",
           "tpot_s", "meets_slo", "validity", "summarise", "summarise_run", "llama_bench", "served_ratio",
           "client_capacity", "summary_row", "sweep_frame", "requests_frame", "sweep_chart", "DEFAULT_SLO",
           "criteria_for", "in_process_for", "cpu_snapshot", "contention", "bench_checks", "peer_summary", "build_record", "roofline_rows", "llama_bench_rows", "capacity_rows", "what_this_means",
           "served_cost_s", "reachable_ratio", "served_gap_markdown"]
