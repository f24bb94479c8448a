"""Bring your own server: what an OpenAI-compatible endpoint the lab did not start says about itself.

    found = endpoint.discover(server)          # server: lab.serving.server.Server (connected or started)
    endpoint.facts_rows(found)                  # context, slots, quantization, VRAM... and the route each came from

One probe per engine, each a few GETs that never raise (an engine that lacks a route answers 404, and
that is itself evidence of which engine it is not):

* any server   GET /v1/models                                    (OpenAI API reference)
* llama-server GET /props, GET /slots                            (tools/server/README.md)
* vLLM         GET /version, GET /metrics                        (docs.vllm.ai, OpenAI-compatible server)
* Ollama       GET /api/version, GET /api/ps, POST /api/show      (docs.ollama.com/api)
* LM Studio    GET /api/v0/models, POST /api/v0/completions       (lmstudio.ai/docs/developer/rest/endpoints)

`identify` names the engine from what answered; `facts` turns the raw answers into one flat dict
(the same keys whatever the engine, None where that engine does not say). Headers carry the key; no
answer kept here contains it: a server may echo it in an error, so every string it sends back goes
through lab.core.redaction.redact (`_excerpt`, and `redact_all` on what `discover` returns).
"""
from __future__ import annotations

import ipaddress
import os
import re
import time
from urllib.parse import urlsplit

import httpx

from lab.core import deadline, display, redaction
from lab.core.deadline import Deadline
from lab.serving import flag_table, shapes

TIMEOUT_S = 10.0  # one route: connect, every read, and the whole reply
# All of discovery (~12 routes): a server that answers each route just under TIMEOUT_S, or trickles its replies,
# still ends discovery here; the routes not asked then are recorded as such.
DISCOVERY_DEADLINE_S = 30.0
# The manifest of a finished run asks an endpoint profile's server again only when notebook 04 did not record
# discovery: a short deadline, since the run is over and a slow server must not hold its manifest.
MANIFEST_DISCOVERY_S = 10.0
EXCERPT_CHARS = 400
ENGINE_NAMES = {"llama.cpp": "llama-server (llama.cpp)", "vllm": "vLLM", "ollama": "Ollama", "lmstudio": "LM Studio",
                "unknown": "an OpenAI-compatible server of unknown make"}
SOURCES = {
    "openai": "https://platform.openai.com/docs/api-reference/models/list",
    "llama.cpp": "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md (GET /props, GET /slots)",
    "vllm": "https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html (/version, /metrics, /v1/models max_model_len)",
    "ollama": "https://docs.ollama.com/api (GET /api/version, GET /api/ps, POST /api/show)",
    "lmstudio": "https://lmstudio.ai/docs/developer/rest/endpoints (GET /api/v0/models, POST /api/v0/completions)",
}


# ---------------------------------------------------------------- where the server is
def is_loopback(url_or_host: str | None) -> bool:
    """Whether a URL (or host name) points at this machine."""
    if not url_or_host:
        return True
    host = urlsplit(url_or_host).hostname if "://" in url_or_host else url_or_host
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def where(profile) -> dict:
    """Where the profile's server runs, for notebooks 01–03: on this machine, or elsewhere (then what
    this machine's checks cannot see)."""
    if not profile.endpoint_url:
        return {"endpoint": False, "local": True, "url": None,
                "text": "The lab starts this profile's server on this machine: the checks below are about the box it runs on."}
    local = is_loopback(profile.endpoint_url)
    if local:
        text = (f"This profile measures a server you run at {profile.endpoint_url}, on this machine (loopback): "
                "the checks below are about the box that server runs on.")
    else:
        text = (f"This profile measures a server you run at {profile.endpoint_url}, on ANOTHER machine. Everything below "
                "is about THIS machine (where the lab runs), not the server's: its GPUs, driver, CUDA, installed engines "
                "and model files cannot be seen from here. What the server reports about itself through its API "
                "(context, quantization, VRAM on Ollama, KV cache on vLLM) is in notebooks 04 and 05; run the lab on "
                "the server's machine to check its hardware and installation.")
    return {"endpoint": True, "local": local, "url": profile.endpoint_url, "text": text}


# ---------------------------------------------------------------- one request, never raising
def _excerpt(text: str, api_key: str | None = None) -> str:
    return redaction.redacted_excerpt(text, EXCERPT_CHARS, api_key)


def request(client: httpx.Client, method: str, url: str, json_body: dict | None = None,
            api_key: str | None = None, limit: Deadline | None = None, shape: str | None = None) -> dict:
    """One HTTP request → {"route", "status", "json", "text", "error", "seconds", "findings"}; never raises. The
    whole reply must arrive before `limit` (default: the client's timeout from now; trickled bytes do not extend it); with
    `shape` (lab.serving.shapes) a 200 reply's JSON is checked, fields of the wrong type removed and named in
    `findings`."""
    t0 = time.monotonic()
    route = f"{method} {urlsplit(url).path}"
    limit = limit or Deadline(client.timeout.read or TIMEOUT_S, route)  # the client's own timeout, as a whole
    out = {"route": route, "status": None, "json": None, "text": "", "error": None, "findings": []}
    try:  # a completion's first byte comes after its whole prefill: any one read may take all of the deadline
        reply = deadline.get(client, method, url, limit, json_body, per_read_s=max(limit.remaining(), 0.001))
        out["status"] = reply.status_code
        out["text"] = _excerpt(reply.text, api_key)
        try:
            out["json"] = reply.json()
        except (ValueError, RecursionError):
            pass
    except httpx.HTTPError as exc:  # deadline.ReplyTooLarge too: the status it came with is kept
        out["status"] = getattr(exc, "status_code", None)
        out["error"] = f"{type(exc).__name__}: {_excerpt(str(exc), api_key)}"
    if shape and out["status"] == 200 and out["json"] is not None:
        out["json"], out["findings"] = shapes.clean(shape, out["json"], route)
    elif shape and out["status"] == 200 and out["error"] is None:  # a sign-in page answering 200 on every route
        out["findings"] = [shapes.not_json(route, reply.headers.get("content-type"))]
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def ok_json(answer: dict) -> dict | list | None:
    return answer["json"] if answer["status"] == 200 and isinstance(answer["json"], (dict, list)) else None


def http_client(api_key: str | None, timeout_s: float = TIMEOUT_S) -> httpx.Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(timeout=timeout_s, trust_env=False, headers=headers)


def _asker(client: httpx.Client, base: str, api_key: str | None, limit: Deadline):
    """ask(method, path, body=None, shape=None) → `request`'s answer, every one under the same overall `limit`
    (each also under TIMEOUT_S); once `limit` passed, the routes not asked yet are answered "not asked"."""
    def ask(method: str, path: str, body: dict | None = None, shape: str | None = None) -> dict:
        if limit.expired:
            return {"route": f"{method} {path}", "status": None, "json": None, "text": "", "findings": [],
                    "error": f"not asked: {limit.message()}", "seconds": 0.0}
        return request(client, method, base + path, body, api_key, limit.sooner(TIMEOUT_S, f"{method} {path}"), shape)
    return ask


# ---------------------------------------------------------------- one probe per engine
# Each probe gets `ask` (see `_asker`): the routes it asks, each reply checked against its shape (lab.serving.shapes).
def probe_openai(ask) -> dict:
    """GET /v1/models: the ids served; llama-server adds `meta` (n_ctx_train, size), vLLM `max_model_len`."""
    return {"models": ask("GET", "/v1/models", shape="models")}


def probe_llama_server(ask) -> dict:
    """GET /props (slots, context per slot, build, model file) and GET /slots (each slot's n_ctx; 501 unless --slots)."""
    return {"props": ask("GET", "/props", shape="llama.props"), "slots": ask("GET", "/slots", shape="llama.slots")}


def probe_vllm(ask) -> dict:
    """GET /version and GET /metrics (vllm:cache_config_info: KV blocks, block size, KV tokens)."""
    return {"version": ask("GET", "/version", shape="version"), "metrics": ask("GET", "/metrics")}


def probe_ollama(ask, model: str | None) -> dict:
    """GET /api/version, GET /api/ps (loaded models: size, size_vram, context_length) and POST /api/show
    (model_info with <arch>.context_length and block_count, details.quantization_level, parameters)."""
    out = {"version": ask("GET", "/api/version", shape="version")}
    if ok_json(out["version"]) is None:
        return out  # not Ollama: do not POST to a route another server may not know
    out["ps"] = ask("GET", "/api/ps", shape="ollama.ps")
    if model:
        out["show"] = ask("POST", "/api/show", {"model": model}, shape="ollama.show")
    return out


def probe_lmstudio(ask, model: str | None) -> dict:
    """GET /api/v0/models (state loaded/not-loaded, quantization, max_context_length, arch) and, for the
    served model, a 1-token POST /api/v0/completions whose `model_info` and `runtime` name the loaded
    context and the engine runtime (llama.cpp or MLX) with its version."""
    out = {"models": ask("GET", "/api/v0/models", shape="models")}
    data = ok_json(out["models"])
    if not isinstance(data, dict) or not any("compatibility_type" in m for m in data.get("data") or []):
        return out
    if model:
        out["completion"] = ask("POST", "/api/v0/completions",
                                {"model": model, "prompt": "Hi", "max_tokens": 1, "temperature": 0},
                                shape="lmstudio.completion")
    return out


# ---------------------------------------------------------------- which engine, and its facts
def identify(probes: dict) -> tuple[str, str | None, str]:
    """(engine, version or None, the evidence) from the probes' answers."""
    ollama = ok_json(probes.get("ollama", {}).get("version", {"status": None, "json": None})) or {}
    if isinstance(ollama, dict) and "version" in ollama:
        return "ollama", str(ollama["version"]), "GET /api/version answered {'version': ...} (Ollama's own API)"
    lms = ok_json(probes.get("lmstudio", {}).get("models", {"status": None, "json": None})) or {}
    if isinstance(lms, dict) and any("compatibility_type" in m for m in lms.get("data") or []):
        runtime = (ok_json(probes["lmstudio"].get("completion", {"status": None, "json": None})) or {}).get("runtime") or {}
        version = f"{runtime['name']} {runtime.get('version')}" if runtime.get("name") else None
        return "lmstudio", version, "GET /api/v0/models lists models with compatibility_type (LM Studio's REST API)"
    props = ok_json(probes.get("llama.cpp", {}).get("props", {"status": None, "json": None})) or {}
    models = ok_json(probes.get("openai", {}).get("models", {"status": None, "json": None})) or {}
    owners = {m.get("owned_by") for m in (models.get("data") or []) if isinstance(m, dict)} if isinstance(models, dict) else set()
    if isinstance(props, dict) and ("build_info" in props or "total_slots" in props) or "llamacpp" in owners:
        return "llama.cpp", props.get("build_info") if isinstance(props, dict) else None, \
            "GET /props answered with build_info/total_slots, or /v1/models says owned_by llamacpp"
    vllm_version = ok_json(probes.get("vllm", {}).get("version", {"status": None, "json": None})) or {}
    if "vllm" in owners or (isinstance(vllm_version, dict) and "version" in vllm_version
                            and "vllm:" in (probes["vllm"].get("metrics") or {}).get("text", "")):
        return "vllm", vllm_version.get("version") if isinstance(vllm_version, dict) else None, \
            "GET /v1/models says owned_by vllm, or /version and vllm: metrics answered"
    return "unknown", None, "none of the engine-specific routes answered"


def _first(items, key, value):
    return next((x for x in items if isinstance(x, dict) and x.get(key) == value), None)


def _model_entry(probes: dict, served: str | None) -> dict:
    data = (ok_json(probes["openai"]["models"]) or {}).get("data") or []
    return _first(data, "id", served) or (data[0] if data and isinstance(data[0], dict) else {})


def _llama_facts(probes: dict, served: str | None) -> dict:
    props = ok_json(probes["llama.cpp"]["props"]) or {}
    slots = ok_json(probes["llama.cpp"]["slots"])
    meta = _model_entry(probes, served).get("meta") or {}
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    total = props.get("total_slots")
    # the profile's names (lab/data/flag_table.yaml): total_slots is parallel_slots, n_ctx × slots its context_tokens
    return {"context_per_request": n_ctx, "parallel_slots": total, "context_tokens": n_ctx * total if n_ctx and total else None,
            "context_trained": meta.get("n_ctx_train"), "model_file": props.get("model_path"),
            "model_bytes": meta.get("size"), "parameters": meta.get("n_params"),
            "slots_endpoint": isinstance(slots, list), "slots_busy": sum(bool(s.get("is_processing")) for s in slots)
            if isinstance(slots, list) else None, "build": props.get("build_info"),
            "sources": {**flag_table.http_sources("llama.cpp"),
                        "build": "GET /props build_info", "slots_busy": "GET /slots is_processing", "context_trained": "GET /v1/models meta.n_ctx_train",
                        "model_bytes": "GET /v1/models meta.size", "model_file": "GET /props model_path"}}


def _vllm_facts(probes: dict, served: str | None) -> dict:
    from lab.serving import vllm_env

    metrics_text = (probes["vllm"]["metrics"] or {}).get("text") or ""
    full = probes["vllm"].get("metrics_full") or metrics_text
    cache = vllm_env.cache_config_from_metrics(full) or {}
    entry = _model_entry(probes, served)
    return {"context_per_request": entry.get("max_model_len"), "context_tokens": entry.get("max_model_len"),
            "gpu_memory_utilization": cache.get("gpu_memory_utilization"), "kv_cache_tokens": cache.get("kv_cache_size_tokens"),
            "kv_cache_blocks": cache.get("num_gpu_blocks"), "kv_block_size": cache.get("block_size"),
            "kv_cache_dtype": cache.get("cache_dtype"), "kv_cache_bytes": cache.get("kv_cache_memory_bytes"),
            "max_concurrency": cache.get("kv_cache_max_concurrency"), "model_root": entry.get("root"),
            "sources": {**flag_table.http_sources("vllm"),
                        "kv_cache_tokens": "GET /metrics vllm:cache_config_info",
                        "kv_cache_blocks": "GET /metrics vllm:cache_config_info num_gpu_blocks"}}


def _ollama_facts(probes: dict, served: str | None) -> dict:
    ps = ok_json(probes["ollama"].get("ps") or {"status": None, "json": None}) or {}
    show = ok_json(probes["ollama"].get("show") or {"status": None, "json": None}) or {}
    running = ps.get("models") or []
    mine = _first(running, "name", served) or _first(running, "model", served)
    info = show.get("model_info") or {}
    arch = info.get("general.architecture")
    params = dict(re.findall(r"^(\S+)\s+(.+)$", show.get("parameters") or "", re.M))
    size, vram = (mine or {}).get("size"), (mine or {}).get("size_vram")
    return {"loaded": mine is not None, "context_per_request": (mine or {}).get("context_length")
            or _int(params.get("num_ctx")),
            "context_trained": info.get(f"{arch}.context_length") if arch else None,
            "layers": info.get(f"{arch}.block_count") if arch else None,
            "quantization": ((mine or {}).get("details") or show.get("details") or {}).get("quantization_level"),
            "memory_bytes": size, "vram_bytes": vram, "gpu_share": round(vram / size, 3) if size and vram is not None else None,
            "parameters_label": ((mine or {}).get("details") or show.get("details") or {}).get("parameter_size"),
            "parallel_slots": None,
            "sources": {"context_per_request": "GET /api/ps context_length (the context Ollama allocated), else "
                        "/api/show parameters num_ctx", "context_trained": "POST /api/show model_info <arch>.context_length",
                        "layers": "POST /api/show model_info <arch>.block_count",
                        "quantization": "GET /api/ps details.quantization_level",
                        "vram_bytes": "GET /api/ps size_vram", "memory_bytes": "GET /api/ps size", "gpu_share": "size_vram ÷ size (`ollama ps` PROCESSOR)"}}


def _lmstudio_facts(probes: dict, served: str | None) -> dict:
    data = (ok_json(probes["lmstudio"]["models"]) or {}).get("data") or []
    mine = _first(data, "id", served) or {}
    done = ok_json(probes["lmstudio"].get("completion") or {"status": None, "json": None}) or {}
    info = done.get("model_info") or {}
    return {"loaded": mine.get("state") == "loaded" if mine else None,
            "context_per_request": info.get("context_length"), "context_trained": mine.get("max_context_length"),
            "quantization": mine.get("quantization") or info.get("quant"), "format": mine.get("compatibility_type"),
            "arch": mine.get("arch"), "runtime": (done.get("runtime") or {}).get("name"),
            "sources": {"context_per_request": "POST /api/v0/completions model_info.context_length (the loaded context)",
                        "context_trained": "GET /api/v0/models max_context_length",
                        "quantization": "GET /api/v0/models quantization", "loaded": "GET /api/v0/models state"}}


def _int(x) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


FACTS_BY_ENGINE = {"llama.cpp": _llama_facts, "vllm": _vllm_facts, "ollama": _ollama_facts, "lmstudio": _lmstudio_facts}
# The model ids a record keeps of /v1/models: the first MAX_MODEL_IDS different ones (a server listing 10^5 put
# them all in notebook 04's record and table), the count of all beside them; the served model is looked for in all.
MAX_MODEL_IDS = 50


def facts(probes: dict, engine: str, served: str | None) -> dict:
    """One flat dict of what the server reports, the same keys whatever the engine (absent: not reported)."""
    models = ok_json(probes["openai"]["models"]) or {}
    every = dict.fromkeys(m.get("id") for m in (models.get("data") or []) if isinstance(m, dict)) if isinstance(models, dict) else {}
    ids = list(every)[:MAX_MODEL_IDS]
    out = {"model_ids": ids, "served_model_listed": served in every if served else None}
    if len(every) > len(ids):
        out["model_ids_listed"] = len(every)
    out.update(FACTS_BY_ENGINE.get(engine, lambda *_: {"sources": {}})(probes, served))
    out["sources"] = {"model_ids": "GET /v1/models", "model_ids_listed": "GET /v1/models", **out.get("sources", {})}
    return out


# ---------------------------------------------------------------- discovery
def discover(base_url: str, api_key: str | None = None, served_model: str | None = None,
             deadline_s: float = DISCOVERY_DEADLINE_S) -> dict:
    """Every probe against `base_url` (the server root, without /v1), which engine answered, its version,
    and its facts, all within `deadline_s` (routes not asked by then say so). Never raises: an unreachable server
    gives reachable False and the error; a reply of an unexpected shape gives `findings`."""
    t0 = time.monotonic()
    limit = Deadline(deadline_s, "discovery")
    with http_client(api_key) as client:
        ask = _asker(client, base_url, api_key, limit)
        probes = {"openai": probe_openai(ask)}
        first = probes["openai"]["models"]
        reachable = first["error"] is None or first["status"] is not None  # a reply too large to read still answered
        if reachable:
            probes["ollama"] = probe_ollama(ask, served_model)
            probes["lmstudio"] = probe_lmstudio(ask, served_model)
            probes["llama.cpp"] = probe_llama_server(ask)
            probes["vllm"] = probe_vllm(ask)
            metrics = probes["vllm"]["metrics"]
            if metrics["status"] == 200:  # the excerpt is short; the cache line can be anywhere in the page
                probes["vllm"]["metrics_full"] = _cache_lines(client, base_url + "/metrics", limit)
    engine, version, how = identify(probes) if reachable else ("unknown", None, "not reachable")
    found = {"base_url": base_url, "served_model": served_model, "reachable": reachable,
             # "ok" only for the API's own answer: an HTML sign-in page answers 200 to every route, and says nothing
             "auth": "rejected" if first["status"] in (401, 403) else ("ok" if ok_json(first) is not None else None),
             "engine": engine, "engine_name": ENGINE_NAMES[engine], "version": version, "identified_by": how,
             "facts": facts(probes, engine, served_model) if reachable else {"sources": {}},
             "findings": shapes.findings_of(probes), "probes": _strip(probes),
             "seconds": round(time.monotonic() - t0, 2), "deadline_s": deadline_s,
             "source": SOURCES.get(engine, SOURCES["openai"])}
    return redaction.redact_all(found, api_key)  # facts and versions are the server's words too


def _cache_lines(client: httpx.Client, url: str, limit: Deadline) -> str:
    """Only the vllm:cache_config_info and num_requests lines of a /metrics page (the page is long)."""
    try:
        text = deadline.get(client, "GET", url, limit.sooner(TIMEOUT_S, "GET /metrics")).text
    except httpx.HTTPError:
        return ""
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(("vllm:cache_config_info", "vllm:num_requests")))


def _strip(probes: dict) -> dict:
    """The probes as kept in a record: route, status, seconds, error, a short text (never a header)."""
    return {engine: {name: {k: a.get(k) for k in ("route", "status", "seconds", "error", "text", "findings")}
                     if isinstance(a, dict) and "route" in a else a for name, a in answers.items()}
            for engine, answers in probes.items()}


def discover_server(server) -> dict:
    """`discover` for a lab.serving.server.Server (one the lab started, or an endpoint it connected to)."""
    return discover(server.base_url, server.api_key, server.command.served_model)


FACT_LABELS = (("model_ids", "models listed"), ("model_ids_listed", "different model ids listed, all told"), ("served_model_listed", "the profile's served_model is listed"),
               ("loaded", "model loaded"), ("context_per_request", "context per request (tokens)"),
               ("parallel_slots", "parallel_slots (requests decoded together)"),
               ("context_tokens", "context_tokens (llama.cpp: all slots; vLLM: one request)"),
               ("gpu_memory_utilization", "gpu_memory_utilization"),
               ("context_trained", "model's trained context (tokens)"), ("quantization", "quantization"),
               ("layers", "layers"), ("model_bytes", "model size (bytes)"),
               ("memory_bytes", "in memory: weights + KV + buffers (bytes)"), ("vram_bytes", "of which in GPU memory (bytes)"),
               ("gpu_share", "share of the model on the GPU"), ("kv_cache_tokens", "KV cache (tokens)"),
               ("kv_cache_blocks", "KV cache blocks"), ("kv_block_size", "KV block size (tokens)"),
               ("kv_cache_dtype", "KV cache dtype"), ("max_concurrency", "max concurrency at full context"),
               ("format", "model format"), ("runtime", "runtime"), ("build", "build"), ("model_file", "model file"))


def facts_rows(found: dict | None) -> list[dict]:
    """What the server reported, one row per fact it gave: label, value, and the route it came from."""
    if not found:
        return []
    rows = [{"fact": "engine found", "value": found["engine_name"], "from": found["identified_by"]},
            {"fact": "engine version", "value": found["version"] or "not reported",
             "from": "the engine's own route" if found["version"] else "—"}]
    f = found["facts"]
    for key, label in FACT_LABELS:
        if f.get(key) is not None:
            value = ", ".join(map(str, f[key])) if isinstance(f[key], list) else f[key]
            rows.append({"fact": label, "value": value, "from": f["sources"].get(key, "")})
    return rows


def probe_rows(found: dict | None) -> list[dict]:
    """Every route asked, with its HTTP status (404: that engine's route is not there)."""
    if not found:
        return []
    return [{"engine": engine, "route": a["route"], "status": a["status"], "seconds": a["seconds"],
             "answer": a["error"] or display.clip(a["text"] or "", 120)}
            for engine, answers in found["probes"].items() for a in answers.values()
            if isinstance(a, dict) and "route" in a]


def api_key_for(profile) -> tuple[str | None, str | None]:
    """(the key, or None; a note when api_key_env names a variable that is not set)."""
    if not profile.api_key_env:
        return None, None
    key = os.environ.get(profile.api_key_env) or None
    return key, None if key else (f"api_key_env names {profile.api_key_env}, which is not set in this environment: "
                                  f"requests go without a key (export {profile.api_key_env}=<key> before `lab run`)")


# ---------------------------------------------------------------- the plan beside what the server says
def discovery_for(profile, records: dict, ask: bool = True, deadline_s: float = DISCOVERY_DEADLINE_S) -> dict | None:
    """What the profile's server said about itself: notebook 04's record in this run when there is one,
    else — for an endpoint profile, unless ask is False — asked now (a few GETs); None for a lab-started
    server not running."""
    from lab.core import planmode

    found = (records.get("04_serve") or {}).get("discovery")
    if found or not profile.endpoint_url or not ask or planmode.reason(profile):  # plan mode contacts nothing
        return found
    return discover(profile.endpoint_base, api_key_for(profile)[0], profile.served_model, deadline_s)


def _norm_quant(q) -> str:
    return re.sub(r"[^A-Z0-9]", "", str(q).upper())


def _row(quantity: str, planned, reported, source: str, same=None) -> dict:
    if reported is None:
        verdict = "not reported"
    elif planned is None:
        verdict = "reported only"
    else:
        verdict = "matches" if (same(planned, reported) if same else planned == reported) else "differs"
    return {"quantity": quantity, "plan": planned, "server": reported, "verdict": verdict, "server's source": source}


def _close(rel: float):
    return lambda a, b: abs(a - b) <= rel * max(abs(a), abs(b), 1)


def plan_vs_server(profile, arch, plan: dict, found: dict | None) -> list[dict]:
    """The plan (profile + lab.predict.memory_plan) beside what the server reports, row by row, where it reports it (pure)."""
    if not found or not found.get("reachable"):
        return []
    f, src = found["facts"], found["facts"].get("sources", {})
    rows = [_row("context per request (tokens)", plan["context_tokens_per_sequence"], f.get("context_per_request"),
                 src.get("context_per_request", "")),
            _row("parallel_slots", plan["parallel_slots"], f.get("parallel_slots"), src.get("parallel_slots", "")),
            _row("context_tokens", plan["context_tokens"], f.get("context_tokens"), src.get("context_tokens", "")),
            _row("model's trained context (tokens)", arch.max_context, f.get("context_trained"), src.get("context_trained", "")),
            _row("layers", arch.n_layers, f.get("layers"), src.get("layers", "")),
            _row("quantization", profile.model_quant, f.get("quantization"), src.get("quantization", ""),
                 lambda a, b: _norm_quant(a) == _norm_quant(b)),
            _row("weights (bytes)", plan["weights_bytes"], f.get("model_bytes"), src.get("model_bytes", ""), _close(0.02)),
            _row("in memory: weights + KV + buffers (bytes)",
                 plan["weights_bytes"] + plan["kv_bytes_total"] + plan["overhead_bytes"], f.get("memory_bytes"),
                 src.get("memory_bytes", ""), _close(0.25))]
    if f.get("kv_cache_tokens") and f.get("kv_cache_bytes"):
        rows.append(_row("KV bytes per token", plan["kv_bytes_per_token"], f["kv_cache_bytes"] / f["kv_cache_tokens"],
                         "GET /metrics kv_cache_memory_bytes ÷ kv_cache_size_tokens", _close(0.01)))
    if f.get("gpu_share") is not None:
        rows.append(_row("share of the model on the GPU", 1.0 if profile.gpu_count else 0.0, f["gpu_share"],
                         src.get("gpu_share", ""), _close(0.02)))
    return [r for r in rows if r["verdict"] != "not reported"]


def plan_checks(rows: list[dict]):
    """One check per compared quantity: pass when the server matches the plan, warn when it differs."""
    from lab.core.checks import Check

    return [Check(f"plan vs server: {r['quantity']}", "pass" if r["verdict"] == "matches" else "warn",
                  r["server"], r["plan"], "" if r["verdict"] == "matches" else
                  "the server was started differently from what the profile says: fix the profile (or the server) so "
                  "the plan describes what runs", r["server's source"])
            for r in rows if r["verdict"] in ("matches", "differs")]


def served_by(profile, records: dict, ask: bool = True) -> dict:
    """The run's server for the manifest: who started it, where, which engine and version (as the server
    said, when it was asked), and the NAME of the key variable — never the key. ask=False: only what the
    run's records say (a cut run's clean-up must not wait on an endpoint)."""
    found = discovery_for(profile, records, ask, MANIFEST_DISCOVERY_S) if profile.endpoint_url else (records.get("04_serve") or {}).get("discovery")
    command = (records.get("04_serve") or {}).get("command") or {}
    return {"started_by_lab": not profile.endpoint_url, "endpoint_url": profile.endpoint_url,
            "served_model": profile.served_model or command.get("served_model"), "api_key_env": profile.api_key_env,
            "engine_declared": profile.engine, "engine_version_declared": profile.engine_version,
            "engine_found": found["engine"] if found else None, "engine_name": found["engine_name"] if found else None,
            "engine_version_found": found["version"] if found else None,
            "identified_by": found["identified_by"] if found else None,
            "engine_version_used": command.get("engine_version"), "version_source": command.get("version_source")}
