"""The lab's load generator for OpenAI-compatible servers: streamed requests, timed chunk by chunk.

* measure     `stream_request`: one streamed request → a `RequestResult` (failures recorded, never raised);
* orchestrate `run_load` / `sweep`: warm-up, then a fixed concurrency or Poisson arrivals under a request
              or time budget → a `RunResult` holding every request.

The arithmetic over those records (percentiles, TTFT/TPOT/ITL, goodput, validity) is lab.measure.metrics; the
tables, charts and notebook 06's record are lab.pages.benchmark (vLLM's several-hundred-line `benchmark()`
that does all of it in one function is the counter-example).

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py `calculate_metrics`): TTFT = send →
first streamed chunk carrying generated text; ITL = gaps between consecutive such chunks; E2EL = send → end
of stream. Output and prompt tokens come from the server's `usage` (requested with
`stream_options: {include_usage: true}`; llama-server also sends `timings` in its last chunk), never from
counting chunks. Prompts differ per request from their first word on: llama-server keeps a prompt cache,
so a repeated prompt set fakes TTFT (llama.cpp tools/server: --cache-ram, the prompt cache); cached prompt tokens are read from the usage.
"""
from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field

import httpx

from lab.core import deadline, interrupt, redaction
from lab.core.deadline import Deadline
from lab.serving import shapes

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
    repetition: int | None = None  # which repetition of its level (`sweep` with repetitions; None: a single run)
    findings: list[str] = field(default_factory=list)  # stream fields of an unexpected type, not used (lab.serving.shapes)

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
    timeout_s: float = 300.0  # one request's OVERALL limit, send to [DONE] (lab.core.deadline), not a per-read timeout
    extra_body: dict | None = None  # more request fields (lab.experiments.tune's sampling variants: samplers, top_k, ...)

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


# A run counts only with at least this many successful requests (lab.measure.metrics.Criteria.min_successes, after
# MLPerf loadgen's minimum query count); the sweep sends at least that many per level whatever the clock says.
MIN_VALID_REQUESTS = 4


@dataclass(frozen=True)
class LoadSpec:
    """How to load the server: at most `concurrency` requests in flight (None = no cap), arrivals as
    fast as that allows or Poisson at `request_rate` per second, until `max_requests` were sent or
    `duration_s` passed (whichever first; requests in flight then finish). `min_requests`: the time budget
    does not end sending before that many were sent (MLPerf loadgen's minimum query count beside its minimum
    duration: a slow or busy machine still gets a valid count; the level's deadline bounds it). Warm-up
    requests go first, one at a time, and are kept apart from the results."""

    concurrency: int | None = 1
    request_rate: float | None = None
    max_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 1
    seed: int = 0
    min_requests: int = 0

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
    # A level measured as several repetitions (`sweep`): each one's own budget and times, in order; the results
    # above are all of theirs (each tagged with its `repetition`), `duration_s` their durations summed.
    repetitions: list[dict] | None = None
    warmup_rounds: dict | None = None  # `warm_up`'s account: every round's throughput and whether it settled
    deadline_s: float | None = None  # the level's overall deadline (bench_duration_s + LEVEL_GRACE_S), when it had one
    cut: str | None = None  # why the level ended before its requests did (its deadline), with how many were cut

    @property
    def output_tokens(self) -> int | None:
        known = [r.output_tokens for r in self.results if r.success and r.output_tokens is not None]
        return sum(known) if known else None

    def to_dict(self) -> dict:
        return {"spec": asdict(self.spec), "target": self.target, "duration_s": self.duration_s,
                "started_utc": self.started_utc, "client_cpu_s": self.client_cpu_s,
                "prompt_words": self.prompt_words, "results": [r.to_dict() for r in self.results],
                "warmup": [r.to_dict() for r in self.warmup], "resources": self.resources,
                "repetitions": self.repetitions, "warmup_rounds": self.warmup_rounds, "deadline_s": self.deadline_s,
                "cut": self.cut}


# ================================================================ prompts
def make_prompts(n: int, words: int, seed: int = 0, tag: str | None = None) -> list[str]:
    """`n` different prompts of `words` words each. Each starts with its own tag and number so no two
    share a prefix (llama-server's prompt cache matches prefixes); the rest is seeded random words."""
    rng = random.Random(seed)
    tag = tag or uuid.uuid4().hex[:8]
    return [f"Request {tag}-{i}: " + " ".join(rng.choice(_WORDS) for _ in range(max(1, words - 2)))
            for i in range(n)]


def count_tokens(base_url: str, text: str, headers: dict | None = None, timeout_s: float = 10.0) -> int | None:
    """Tokens the server's tokenizer makes of `text` (llama-server and vLLM `/tokenize`), the reply whole within
    `timeout_s`; None if it has no such route or answers otherwise."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, headers=headers or {}) as client:
            reply = deadline.get(client, "POST", base_url.rstrip("/") + "/tokenize", Deadline(timeout_s, "POST /tokenize"),
                                 {"content": text, "prompt": text})
        data, _ = shapes.clean("tokenize", reply.json(), "POST /tokenize")
    except (httpx.HTTPError, ValueError, RecursionError):
        return None
    if reply.status_code != 200 or data is None:
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
                         run_t0: float, limit: Deadline | None = None) -> RequestResult:
    """Send one streaming request and record it. Never raises (except on cancellation): an HTTP error,
    a dropped connection, a timeout or a malformed stream end as `success=False` with the reason and
    whatever chunks had arrived. The whole request — send to [DONE] — must end within `target.timeout_s` and
    before `limit` (its level's deadline) whichever comes first: chunks that keep arriving do not extend it (a
    server that never sends [DONE], trickles, or froze). Chunks of an unexpected shape (lab.serving.shapes) are
    read without the wrong fields, which are named in `findings`."""
    res = RequestResult(index)
    sent = time.perf_counter()
    res.start_s = sent - run_t0
    own = Deadline(target.timeout_s, f"one request (Target.timeout_s {target.timeout_s:g} s, send to [DONE])")
    limit = own if limit is None else limit.sooner(target.timeout_s, own.what)
    done = False
    try:
        async with asyncio.timeout(limit.remaining()):
            done = await _read_stream(client, target, prompt, res, sent)
    except TimeoutError:
        res.error = (f"deadline: {redaction.redact(limit.message(), target.api_key)}; {res.choice_chunks} chunk(s) "
                     "had arrived")
    except (httpx.HTTPError, OSError) as exc:
        res.error = f"{type(exc).__name__}: {redaction.redact(str(exc), target.api_key)}" if str(exc) else type(exc).__name__
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


MAX_FINDINGS = 5  # per request: a server that sends every chunk wrong says so in the first few
# A stream's budget, whatever its deadline: a server that streams tiny chunks and never sends [DONE] made one 125 s
# warm-up request a 209 MB record (every chunk's time kept) at 1.9 GB of memory. A server sends about one event per
# token (the role, usage and finish events besides): past STREAM_EVENTS_PER_TOKEN per token asked for, plus
# STREAM_SLACK_EVENTS, or past MAX_STREAM_BYTES in all, the request ends failed, saying so.
STREAM_EVENTS_PER_TOKEN = 4
STREAM_SLACK_EVENTS = 256
MAX_STREAM_BYTES = 8 << 20


def stream_budget(max_tokens: int) -> tuple[int, int]:
    """(the most `data:` events, the most bytes) one streamed request of `max_tokens` may take."""
    return STREAM_EVENTS_PER_TOKEN * max(1, max_tokens) + STREAM_SLACK_EVENTS, MAX_STREAM_BYTES


async def _read_stream(client: httpx.AsyncClient, target: Target, prompt: str, res: RequestResult, sent: float) -> bool:
    """Read one request's stream into `res`; True when [DONE] came. An HTTP error or an error event sets res.error."""
    key = target.api_key
    async with client.stream("POST", target.url, json=target.payload(prompt), headers=target.headers()) as resp:
        if resp.status_code != 200:  # an error body is read capped, as every reply (lab.core.deadline)
            body = (await deadline.read_capped(resp)).decode(errors="replace")
            res.error = f"HTTP {resp.status_code}: {redaction.redacted_excerpt(body, 300, key)}"
            return False
        max_events, max_bytes = stream_budget(target.max_tokens)
        events = seen = 0
        empty: list[float] = []  # arrivals of chunks with choices but no text (see below)
        async for line in deadline.lines(resp):  # each line capped: an endless `data:` line ends the request
            seen += len(line) + 1
            events += line.startswith("data:")
            if events > max_events or seen > max_bytes:  # a stream without an end, cut by its budget
                res.error = (f"stream past its budget: {events:,} events, {seen:,} bytes for max_tokens "
                             f"{target.max_tokens} (at most {max_events:,} events, {max_bytes:,} bytes) without [DONE]; "
                             "not read further")
                return False
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                if not res.chunk_times_s and empty and (res.output_tokens or 0) > 0:
                    # Every token came as an empty delta: special tokens, which the server does not show
                    # (vLLM's skip_special_tokens), as a random-weight stand-in draws them (vLLM on the lent H100,
                    # 2026-12-07: 11 of 48 requests). The tokens were generated and streamed, so they are timed by
                    # their chunks, as `vllm bench serve` times every chunk; the request says so.
                    res.chunk_times_s, res.ttft_s = empty, empty[0]
                    res.findings.append(f"no text: {res.output_tokens} token(s) arrived as {len(empty)} empty "
                                        "chunk(s) (special tokens not shown); timed by those chunks")
                return True
            now = time.perf_counter()
            try:
                raw = json.loads(data)
            except (ValueError, RecursionError):
                res.error = f"malformed chunk: {redaction.redacted_excerpt(data, 120, key)!r}"
                continue
            chunk, odd = shapes.clean("chunk", raw, "stream chunk")
            if odd and len(res.findings) < MAX_FINDINGS:
                res.findings += [redaction.redacted_excerpt(f, 200, key) for f in odd[:MAX_FINDINGS - len(res.findings)]]
            if chunk is None:
                continue
            if chunk.get("error") is not None:
                res.error = f"server error in stream: {redaction.redacted_excerpt(str(chunk['error']), 300, key)}"
                return False
            choices = chunk.get("choices")
            text = _text_of(choices[0]) if choices else ""
            if choices:
                res.first_choice_s = now - sent if res.first_choice_s is None else res.first_choice_s
                res.last_choice_s = now - sent
                res.choice_chunks += 1
            if choices and not text and not res.chunk_times_s:
                empty.append(now - sent)
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
                res.server_timings = redaction.redact_all(chunk["timings"], key)
                if res.cached_tokens is None:
                    res.cached_tokens = chunk["timings"].get("cache_n")
    return False


# ================================================================ orchestrate
def _client(concurrency: int | None, timeout_s: float) -> httpx.AsyncClient:
    n = max(concurrency or 64, 1)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), trust_env=False,
                             limits=httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4))


async def run_load_async(target: Target, prompts: list[str], spec: LoadSpec, on_result=None,
                         limit: Deadline | None = None) -> RunResult:
    """Warm-up, then the load of `spec`. Prompts are used in order, each at most once: give at least
    warmup_requests + max_requests of them (with only a time budget, sending stops when they run out).
    `on_result(result)`, when given, is called as each measured request ends (progress, tests). `limit` (the
    level's deadline): nothing is sent after it, and every request still running then ends there, failed, with
    the reason (`RunResult.cut` counts them)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cpu0 = time.process_time()
    rng = random.Random(spec.seed)
    queue = list(prompts)
    async with _client(spec.concurrency, target.timeout_s) as client:
        warm = []
        for i in range(min(spec.warmup_requests, len(queue))):
            if limit is not None and limit.expired:
                break
            warm.append(await stream_request(client, target, queue.pop(0), -1 - i, time.perf_counter(), limit))
        sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        t0 = time.perf_counter()
        deadline_t = t0 + spec.duration_s if spec.duration_s else math.inf
        tasks: list[asyncio.Task] = []

        async def one(i: int, prompt: str) -> RequestResult:
            try:
                res = await stream_request(client, target, prompt, i, t0, limit)
                if i == 0:
                    interrupt.cut_point("mid-benchmark")  # tests: a run cut with the load under way
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
            budget_t = deadline_t if i >= spec.min_requests else math.inf  # the minimum count goes on past it
            if sem:
                remaining = min(budget_t - time.perf_counter(), limit.remaining() if limit else math.inf)
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(sem.acquire(), timeout=None if math.isinf(remaining) else remaining)
                except asyncio.TimeoutError:
                    break
            if time.perf_counter() >= budget_t or (limit is not None and limit.expired):
                if sem:
                    sem.release()
                break
            tasks.append(asyncio.create_task(one(i, queue.pop(0))))
            i += 1
        results = list(await asyncio.gather(*tasks))
        duration = time.perf_counter() - t0
    run = RunResult(spec, repr(target), results, duration, warm, started, time.process_time() - cpu0,
                    len(prompts[0].split()) if prompts else 0, t0, t0 + duration)
    run.deadline_s, run.cut = (limit.seconds if limit else None), cut_reason(warm + results, limit)
    return run


def cut_reason(results: list[RequestResult], limit: Deadline | None) -> str | None:
    """How many of `results` the level's deadline ended, and that deadline; None when it ended none."""
    if limit is None or not limit.expired:
        return None
    cut = [r for r in results if (r.error or "").startswith("deadline: " + limit.what)]
    return (f"{len(cut)} request(s) cut at the deadline of {limit.what}: {limit.seconds:g} s; "
            f"{sum(r.success for r in results)} ok before it") if cut else None


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


def run_load(target: Target, prompts: list[str], spec: LoadSpec, on_result=None,
             limit: Deadline | None = None) -> RunResult:
    """`run_load_async` for plain code and notebook cells alike."""
    return _run_coro(run_load_async(target, prompts, spec, on_result, limit))


__all__ = ["RequestResult", "Target", "LoadSpec", "RunResult", "make_prompts", "count_tokens", "words_for_tokens",
           "stream_request", "run_load_async", "run_load", "cut_reason", "MIN_VALID_REQUESTS"]
