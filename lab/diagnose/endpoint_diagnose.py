"""What goes wrong between a client and a server the user runs, asked of that server and diagnosed.

Five requests, each answered by the real endpoint and read with the knowledge base
(lab/data/troubleshooting.yaml through lab.diagnose.troubleshoot.match_text):

1. reach     GET /v1/models with the key: connection refused, a wrong URL, 401;
2. key       the same without the key: does the server enforce one (401), or serve anyone;
3. model     a 1-token completion for served_model: "model not found", "no models loaded";
4. name      a 1-token completion for a model that does not exist: does the server check names at all;
5. context   a prompt ~1.5× the context the server gives one request: refused loudly (llama-server,
             vLLM: HTTP 400), or — Ollama — truncated silently, seen as usage.prompt_tokens < tokens sent.

`why_unreachable(profile)` is the same first request, for notebooks that need a working server.
"""
from __future__ import annotations

import time

import httpx

from lab.core import display, evidence
from lab.measure import loadgen
from lab.diagnose import troubleshoot
from lab.core.checks import Check
from lab.serving.endpoint import http_client, ok_json, api_key_for, discover, is_loopback, request

# A 200 whose body is not the API's JSON: an HTML sign-in page (or a proxy's page) that answers every route.
NOT_THE_API = "answered HTTP 200 with a page that is not the API's JSON (a sign-in page or a proxy in front of the server?)"

NO_SUCH_MODEL = "lab-probe-no-such-model"
CONTEXT_FACTOR = 1.5  # how far past the context the overflow probe goes
MAX_PROBE_TOKENS = 16_384  # beyond this the probe costs a long prefill on a big model: not sent
SOURCE = "lab.diagnose.endpoint_diagnose (requests to the endpoint, this run) + lab/data/troubleshooting.yaml"


def _answer_text(a: dict) -> str:
    """What a request got, as one line a person (and the knowledge base) can read."""
    if a["error"]:
        return a["error"]
    return f"HTTP {a['status']}: {a['text']}"


def why_unreachable(profile) -> str | None:
    """None when the endpoint answers GET /v1/models with 200 (or the profile starts its own server);
    else what went wrong and what to do."""
    if not profile.endpoint_url:
        return None
    key, note = api_key_for(profile)
    with http_client(key) as client:
        a = request(client, "GET", profile.endpoint_base + "/v1/models", api_key=key)
    if a["status"] == 200 and ok_json(a) is not None:
        return None
    if a["status"] == 200:
        return (f"{profile.endpoint_url} {NOT_THE_API}. Fix: set endpoint_url to the API's base URL, or sign in to the "
                "proxy another way")
    if a["error"]:
        return (f"nothing usable answers at {profile.endpoint_url} ({a['error']}). Fix: start the server (`ollama serve`, "
                "`lms server start`, `llama-server ...`, `vllm serve ...`) or correct endpoint_url in the profile")
    if a["status"] in (401, 403):
        return (f"{profile.endpoint_url} refused the request (HTTP {a['status']}): it wants an API key. "
                + (note or ("Fix: set api_key_env in the profile to the name of an environment variable holding the key"
                            if not profile.api_key_env else f"Fix: check the key in {profile.api_key_env}")))
    return f"GET {profile.endpoint_base}/v1/models answered HTTP {a['status']}: {display.clip(a['text'], 200)} (is endpoint_url the server's base URL?)"


class EndpointUnreachable(RuntimeError):
    """The endpoint profile's server does not answer usably; the message says why and what to do."""


def require_reachable(profile) -> None:
    """Raise EndpointUnreachable (the notebook fails, saying why) unless the endpoint answers; a profile
    whose server the lab starts passes, and so does any profile in plan mode (nothing is contacted)."""
    from lab.core import planmode

    if planmode.reason(profile):
        return
    reason = why_unreachable(profile)
    if reason:
        raise EndpointUnreachable(reason)


# ---------------------------------------------------------------- the probes
def _probe(name: str, what: str, a: dict | None, verdict: str, severity: str, extra: dict | None = None) -> dict:
    text = _answer_text(a) if a else verdict
    found = troubleshoot.match_text(text + "\n" + verdict)
    return {"probe": name, "request": what, "status": a["status"] if a else None, "answer": display.clip(text, 300),
            "verdict": verdict, "severity": severity, "kb": [f.entry_id for f in found],
            "kb_title": found[0].title if found else None,
            "fix": found[0].fix if found and severity in ("error", "fail", "warn") else None, **(extra or {})}


def probe_reach(client: httpx.Client, base: str, key: str | None, key_note: str | None) -> dict:
    a = request(client, "GET", base + "/v1/models", api_key=key)
    if a["error"]:
        return _probe("reach", "GET /v1/models", a, "the server cannot be reached", "error")
    if a["status"] in (401, 403):
        why = key_note or ("the profile sets no api_key_env" if key is None else "the key was refused")
        return _probe("reach", "GET /v1/models", a, f"the server wants a key: {why}", "error")
    ok = ok_json(a) is not None
    return _probe("reach", "GET /v1/models", a, "answers" if ok else NOT_THE_API if a["status"] == 200 else
                  "unexpected answer", "pass" if ok else "error")


def probe_key(client_nokey: httpx.Client, base: str, key: str | None, local: bool) -> dict:
    a = request(client_nokey, "GET", base + "/v1/models")
    if a["error"]:
        return _probe("key", "GET /v1/models without a key", a, "not reachable", "skip")
    if a["status"] in (401, 403):
        return _probe("key", "GET /v1/models without a key", a, "the server enforces its key", "pass")
    if ok_json(a) is None:
        return _probe("key", "GET /v1/models without a key", a, f"{NOT_THE_API}: whether the API checks a key is not "
                      "known", "warn")
    if key:
        return _probe("key", "GET /v1/models without a key", a,
                      "a key is configured but the server answers without one: it does not check keys", "warn")
    return _probe("key", "GET /v1/models without a key", a, "the server needs no key" +
                  ("" if local else ": anyone who can reach it can use it"), "pass" if local else "warn")


def _one_token(client: httpx.Client, base: str, model: str, key: str | None) -> dict:
    return request(client, "POST", base + "/v1/completions",
                   {"model": model, "prompt": "Hi", "max_tokens": 1, "temperature": 0}, api_key=key, shape="completion")


def probe_model(client: httpx.Client, base: str, model: str, key: str | None) -> dict:
    a = _one_token(client, base, model, key)
    ok = bool((ok_json(a) or {}).get("choices"))  # the API's completion, not any page answering 200
    return _probe("model", f"POST /v1/completions model={model!r}", a,
                  "the served model answers" if ok else f"the server did not serve model {model!r}",
                  "pass" if ok else "error")


def probe_name(client: httpx.Client, base: str, key: str | None) -> dict:
    a = _one_token(client, base, NO_SUCH_MODEL, key)
    if ok_json(a) is not None:
        return _probe("name", f"POST /v1/completions model={NO_SUCH_MODEL!r}", a,
                      "the server ignores the model name (llama-server serves its one model whatever is asked): "
                      "a typo in served_model goes unnoticed", "info")
    return _probe("name", f"POST /v1/completions model={NO_SUCH_MODEL!r}", a,
                  "the server checks model names: this is the text a wrong served_model gets", "info")


def context_for_probe(found: dict | None, profile) -> tuple[int, str]:
    """The context one request gets, as the server reports it, else as the profile plans it."""
    reported = ((found or {}).get("facts") or {}).get("context_per_request")
    if reported:
        return int(reported), "reported by the server"
    from lab.predict import kvcache

    per_request = kvcache.context_per_request(profile.engine, profile.context_tokens, profile.parallel_slots)
    how = {"vllm": "the profile's context_tokens (vLLM's max_model_len, whatever the concurrency)",
           "llama.cpp": "the profile's context_tokens ÷ parallel_slots, rounded up to 256 as llama.cpp does",
           "llama-cpp-python": "the profile's context_tokens ÷ parallel_slots, rounded up to 256 as llama.cpp does"}
    return per_request, how.get(profile.engine, "the profile's context_tokens ÷ parallel_slots")


def probe_context(client: httpx.Client, base: str, model: str, key: str | None, context: int, context_from: str) -> dict:
    """A prompt past the context: refused (HTTP 4xx), truncated (usage.prompt_tokens < sent) or it fit."""
    target = int(context * CONTEXT_FACTOR) + 64
    what = f"POST /v1/completions, a prompt of ~{target} tokens (context {context}, {context_from})"
    if target > MAX_PROBE_TOKENS:
        return _probe("context", what, None, f"not sent: {target} tokens would cost a long prefill (limit {MAX_PROBE_TOKENS})", "skip")
    prompt = loadgen.make_prompts(1, target, seed=7, tag="ctxprobe")[0]
    sent = loadgen.count_tokens(base, prompt, client.headers)
    counted = "counted by the server's /tokenize" if sent else "at least one token per word (no /tokenize)"
    sent = sent or len(prompt.split())
    a = request(client, "POST", base + "/v1/completions",
                {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}, api_key=key, shape="completion")
    extra = {"tokens_sent": sent, "tokens_sent_how": counted, "context": context}
    if a["status"] != 200:
        return _probe("context", what, a, "refused loudly: the client learns the prompt was too long", "pass", extra)
    used = ((a["json"] or {}).get("usage") or {}).get("prompt_tokens")
    extra["usage_prompt_tokens"] = used
    if used is not None and used < 0.9 * sent:
        return _probe("context", what, a, f"prompt truncated by the server: sent {sent} tokens, usage.prompt_tokens {used} "
                      "(the start of the prompt was dropped without an error)", "fail", extra)
    if used is None:
        return _probe("context", what, a, "accepted; the server reports no usage, so truncation cannot be seen", "warn", extra)
    return _probe("context", what, a, f"accepted whole ({used} prompt tokens): the context is larger than {context}", "warn", extra)


def run(profile) -> dict:
    """All five probes against the profile's endpoint; what each got, its verdict and knowledge-base entry."""
    if not profile.endpoint_url:
        return {"skipped": "not an endpoint profile: the lab starts this server (the sections below reproduce its pitfalls)",
                "probes": [], "discovery": None}
    from lab.core import planmode

    plan = planmode.reason(profile)
    if plan:
        return {"skipped": f"{plan}: the five probes would be sent to {profile.endpoint_url}", "probes": [],
                "discovery": None}
    t0 = time.monotonic()
    key, note = api_key_for(profile)
    base, model = profile.endpoint_base, profile.served_model
    found = discover(base, key, model)
    with http_client(key, timeout_s=120) as client, http_client(None) as nokey:
        probes = [probe_reach(client, base, key, note)]
        if probes[0]["severity"] != "error" or probes[0]["status"] in (401, 403):
            probes.append(probe_key(nokey, base, key, is_loopback(base)))
        if probes[0]["severity"] == "pass":
            context, context_from = context_for_probe(found, profile)
            probes += [probe_model(client, base, model, key), probe_name(client, base, key),
                       probe_context(client, base, model, key, context, context_from)]
    return {"skipped": None, "url": profile.endpoint_url, "key_note": note, "engine": found["engine_name"],
            "version": found["version"], "probes": probes, "seconds": round(time.monotonic() - t0, 1)}


def rows(result: dict) -> list[dict]:
    return [{"probe": p["probe"], "request": p["request"], "answer": display.clip(p["answer"], 160), "verdict": p["verdict"],
             "status": p["severity"], "knowledge base": ", ".join(p["kb"]) or "—", "fix": p["fix"] or ""}
            for p in result["probes"]]


def checks(result: dict) -> list[Check]:
    """One check per probe (pass/warn/fail/skip/info as the verdict says)."""
    status = {"pass": "pass", "warn": "warn", "fail": "fail", "error": "fail", "skip": "skip", "info": "pass"}
    return [Check(f"endpoint: {p['probe']}", status[p["severity"]], display.clip(p["answer"], 120), display.clip(p["verdict"], 160),
                  p["fix"] or "", SOURCE) for p in result["probes"]]


def build_record(result: dict) -> dict:
    """The 07_endpoint record: the probes, their verdicts and the knowledge-base entries they matched."""
    found = checks(result)
    summary = {"skipped": result["skipped"], "engine": result.get("engine"), "version": result.get("version"),
               "probes": len(result["probes"]), "failed": sum(c.status == "fail" for c in found),
               "warned": sum(c.status == "warn" for c in found),
               "kb_entries": sorted({k for p in result["probes"] for k in p["kb"]})}
    return {"title": f"The endpoint diagnosed: {result.get('url') or 'none'}", "summary": summary,
            "checks": [c.to_dict() for c in found], "tables": [evidence.table_entry("Endpoint probes", rows(result))],
            "endpoint_probes": result}


def what_this_means(record: dict) -> str:
    """The 07_endpoint record's closing text (Markdown, one point per line): why nothing was probed, that every
    probe answered as it should, or each probe that did not, with its fix."""
    result = record["endpoint_probes"]
    if result["skipped"]:
        return f"- Endpoint probes not run: {result['skipped']}."
    bad = [p for p in result["probes"] if p["severity"] in ("error", "fail", "warn")]
    if not bad:
        return f"- {result['engine']} at {result['url']} answered every probe as it should."
    return "\n".join(f"- {p['probe']}: {p['verdict']}" + (f" — fix: {p['fix']}" if p["fix"] else "") for p in bad)
