"""FAKE Ollama and LM Studio servers, for unit tests of discovery and diagnosis only.

These two engines cannot run on this machine (no Ollama or LM Studio binary, no network to fetch one), so
their HTTP answers are rebuilt here from their documentation. Nothing here measures anything: the real
llama-server and vLLM are tested as endpoints in tests/notebooks/test_endpoint_llama.py and tests/notebooks/test_endpoint_vllm.py.

Documented responses copied in shape (values are examples):
* Ollama   GET /api/version       https://docs.ollama.com/api/version             {"version": "0.12.6"}
           GET /api/ps            https://docs.ollama.com/api/ps                  models[].size, size_vram, context_length, details
           POST /api/show         https://docs.ollama.com/api/show                model_info (<arch>.context_length, .block_count), details, parameters
           GET /v1/models         https://docs.ollama.com/api/openai-compatibility  owned_by "library"
           404 for a model not pulled: ollama/ollama server/routes.go 'model %q not found, try pulling it first'
           a prompt longer than num_ctx is truncated, not refused (https://github.com/ollama/ollama/issues/10368):
           the fake keeps the last `context` words and reports them as usage.prompt_tokens
           its stream sends no usage chunk (as Ollama releases before stream_options support did), and it runs one
           request at a time (OLLAMA_NUM_PARALLEL=1, https://docs.ollama.com/faq)
* LM Studio GET /api/v0/models    https://lmstudio.ai/docs/developer/rest/endpoints  state, quantization, max_context_length
           POST /api/v0/completions the same page: model_info.context_length, runtime {name, version}
           GET /v1/models          https://lmstudio.ai/docs/developer/openai-compat
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OLLAMA_MODEL = "qwen3:8b"
OLLAMA_CONTEXT = 4096
LMSTUDIO_MODEL = "qwen3-8b"

OLLAMA_PS = {"models": [{
    "name": OLLAMA_MODEL, "model": OLLAMA_MODEL, "size": 6591830464,
    "digest": "a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a",
    "details": {"parent_model": "", "format": "gguf", "family": "qwen3", "families": ["qwen3"],
                "parameter_size": "8.2B", "quantization_level": "Q4_K_M"},
    "expires_at": "2026-12-01T10:00:00Z", "size_vram": 5333539264, "context_length": OLLAMA_CONTEXT}]}
OLLAMA_SHOW = {
    "parameters": "temperature 0.6\nnum_ctx 4096\nstop \"<|im_end|>\"",
    "details": {"parent_model": "", "format": "gguf", "family": "qwen3", "families": ["qwen3"],
                "parameter_size": "8.2B", "quantization_level": "Q4_K_M"},
    "model_info": {"general.architecture": "qwen3", "general.parameter_count": 8190735360,
                   "qwen3.block_count": 36, "qwen3.context_length": 40960, "qwen3.attention.head_count_kv": 8},
    "capabilities": ["completion"]}
LMSTUDIO_MODELS = {"object": "list", "data": [
    {"id": LMSTUDIO_MODEL, "object": "model", "type": "llm", "publisher": "lmstudio-community", "arch": "qwen3",
     "compatibility_type": "gguf", "quantization": "Q4_K_M", "state": "loaded", "max_context_length": 40960},
    {"id": "text-embedding-nomic-embed-text-v1.5", "object": "model", "type": "embeddings", "publisher": "nomic-ai",
     "arch": "nomic-bert", "compatibility_type": "gguf", "quantization": "Q4_0", "state": "not-loaded",
     "max_context_length": 2048}]}


class QuietJSONHandler(BaseHTTPRequestHandler):
    """What every fake here shares: no request log on stderr, and `_send` of a JSON (or plain text) body."""

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving(handler, on_exit=None):
    """`handler` (a class) on a free loopback port in a daemon thread; yields the base URL (no /v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if on_exit:
            on_exit()
        server.shutdown()
        server.server_close()


class _Handler(QuietJSONHandler):
    kind = "ollama"
    lock = threading.Lock()
    token_s = 0.002

    def do_GET(self):
        routes = ({"/api/version": {"version": "0.12.6"}, "/api/ps": OLLAMA_PS,
                   "/v1/models": {"object": "list", "data": [{"id": OLLAMA_MODEL, "object": "model", "created": 1764000000,
                                                              "owned_by": "library"}]}}
                  if self.kind == "ollama" else
                  {"/api/v0/models": LMSTUDIO_MODELS,
                   "/v1/models": {"object": "list", "data": [{"id": m["id"], "object": "model", "owned_by": "organization_owner"}
                                                              for m in LMSTUDIO_MODELS["data"]]}})
        if self.path in routes:
            return self._send(200, routes[self.path])
        return self._send(404, {"error": "404 page not found"} if self.kind == "ollama" else {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        model = body.get("model")
        if self.kind == "ollama" and self.path == "/api/show":
            return self._send(200, OLLAMA_SHOW) if model == OLLAMA_MODEL else \
                self._send(404, {"error": f"model '{model}' not found"})
        if self.kind == "lmstudio" and self.path == "/api/v0/completions":
            return self._send(200, {"id": "cmpl-1", "object": "text_completion", "model": model,
                                    "choices": [{"index": 0, "text": " hi", "finish_reason": "length"}],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                                    "model_info": {"arch": "qwen3", "quant": "Q4_K_M", "format": "gguf", "context_length": 4096},
                                    "runtime": {"name": "llama.cpp-linux-x86_64-nvidia-cuda-avx2", "version": "1.52.1",
                                                "supported_formats": ["gguf"]}})
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send(404, {"error": "not found"})
        served = OLLAMA_MODEL if self.kind == "ollama" else LMSTUDIO_MODEL
        if model != served:
            return self._send(404, {"error": {"message": f'model "{model}" not found, try pulling it first',
                                              "type": "api_error", "param": None, "code": None}})
        prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        prompt_tokens = min(len(prompt.split()), OLLAMA_CONTEXT)  # truncated to num_ctx, silently
        n = int(body.get("max_tokens") or 8)
        with self.lock:  # one request at a time, like OLLAMA_NUM_PARALLEL=1
            if body.get("stream"):
                return self._stream(n, body)
            time.sleep(self.token_s * n)
        choice = ({"index": 0, "text": " word" * n, "finish_reason": "length"} if self.path == "/v1/completions" else
                  {"index": 0, "message": {"role": "assistant", "content": " word" * n}, "finish_reason": "length"})
        self._send(200, {"id": "x", "object": "text_completion", "model": model, "choices": [choice],
                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                                   "total_tokens": prompt_tokens + n}})

    def _stream(self, n: int, body: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chat = "messages" in body
        for _ in range(n):
            time.sleep(self.token_s)
            choice = {"index": 0, "delta": {"content": " word"}} if chat else {"index": 0, "text": " word"}
            self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            self.wfile.flush()
        end = {"index": 0, "delta": {}, "finish_reason": "length"} if chat else {"index": 0, "text": "", "finish_reason": "length"}
        self.wfile.write(f"data: {json.dumps({'choices': [end]})}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


@contextmanager
def fake_server(kind: str, token_s: float = 0.002):
    """A FAKE `kind` ("ollama" | "lmstudio") server on a free loopback port; yields its base URL (no /v1)."""
    handler = type(f"Fake{kind.title()}", (_Handler,), {"kind": kind, "lock": threading.Lock(), "token_s": token_s})
    with serving(handler) as base:
        yield base


# ---------------------------------------------------------------- hostile servers (deadlines and shapes)
# FAKE servers that misbehave the ways issue-style probes found (tests/unit/test_reliability_deadlines.py):
#   "trickle"    every route answers 200 and then sends its body one byte every TRICKLE_S, never ending it: a
#                per-read timeout is reset by each byte, so only an overall deadline ends the wait;
#   "trickle_headers" the same with the headers: a status line, then one byte of a header every TRICKLE_S;
#   "no_done"    /v1/models answers; a streamed completion sends a token chunk every TRICKLE_S for ever, never
#                [DONE] (a non-streamed one trickles);
#   "frozen"     reads the request and never answers (what a SIGSTOPped llama-server looks like from the client:
#                the kernel still accepts connections on its listening socket);
#   "wrong_types" answers every route at once, with fields of another type than the engine documents
#                (WRONG_PROPS[variant] for /props), and streams chunks with wrong fields among right ones.
# Each handler stops when the server is shut down (the `stop` event), so no thread outlives its test.
TRICKLE_S = 0.2
WRONG_PROPS = {"settings_string": {"default_generation_settings": "x", "total_slots": 1, "build_info": "b1-fake"},
               "n_ctx_list": {"default_generation_settings": {"n_ctx": [4096]}, "total_slots": "two",
                              "build_info": "b1-fake"}}
WRONG = {"/v1/models": {"object": "list", "data": [{"id": "m", "owned_by": "llamacpp",
                                                     "meta": {"n_ctx_train": [1], "size": "big"}}, "junk"]},
         "/slots": [{"id": 0, "is_processing": "maybe"}, 7],
         "/version": {"version": ["0.1"]},
         "/health": {"status": "ok"}}


class _Hostile(QuietJSONHandler):
    mode = "frozen"
    props = "settings_string"
    stop: threading.Event

    def _trickle(self, content_type: str, unit: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        try:
            while not self.stop.wait(TRICKLE_S):
                self.wfile.write(unit)
                self.wfile.flush()
        except OSError:  # the client gave up: what the test wants
            pass

    def _handle(self, body: dict) -> None:
        if self.mode == "frozen":
            self.stop.wait()
            return
        if self.mode == "trickle_headers":
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not self.stop.wait(TRICKLE_S):
                    self.wfile.write(b"a")
                    self.wfile.flush()
            except OSError:
                pass
            return None
        if self.mode == "trickle":
            return self._trickle("text/event-stream" if body.get("stream") else "application/json",
                                 b":" if body.get("stream") else b" ")
        if self.mode == "no_done":
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": "m", "owned_by": "llamacpp"}]})
            if body.get("stream"):
                return self._trickle("text/event-stream",
                                     f"data: {json.dumps({'choices': [{'index': 0, 'text': ' word'}]})}\n\n".encode())
            return self._trickle("application/json", b" ")
        return self._wrong(body)

    def _wrong(self, body: dict) -> None:
        if self.path == "/props":
            return self._send(200, WRONG_PROPS[self.props])
        if self.path in WRONG:
            return self._send(200, WRONG[self.path])
        if self.path == "/tokenize":
            return self._send(200, {"tokens": "abc", "count": "many"})
        if self.path == "/v1/completions" and not body.get("stream"):
            return self._send(200, {"choices": "x", "usage": [1, 2], "model": {"name": "m"}})
        if self.path == "/v1/chat/completions":
            return self._send(200, {"choices": [{"message": "hi", "finish_reason": 3}], "usage": {"prompt_tokens": "x"}})
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            events = [{"choices": [{"index": 0, "text": 5}], "usage": "many"},  # wrong: text a number, usage a string
                      *({"choices": [{"index": 0, "text": " word"}]} for _ in range(int(body.get("max_tokens") or 4))),
                      ["not", "a", "chunk"],
                      {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": int(body.get("max_tokens") or 4)},
                       "timings": {"cache_n": "none", "predicted_n": 4}}]
            self.wfile.write("".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n")
            return None
        return self._send(404, {"error": "not found"})

    def do_GET(self):
        self._handle({})

    def do_POST(self):
        self._handle(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"))


@contextmanager
def hostile_server(mode: str, props: str = "settings_string"):
    """A FAKE misbehaving server (see the modes above) on a free loopback port; yields its base URL (no /v1)."""
    stop = threading.Event()
    handler = type(f"Hostile_{mode}", (_Hostile,), {"mode": mode, "props": props, "stop": stop})
    with serving(handler, on_exit=stop.set) as base:
        yield base


def endpoint_profile(tmp_path: Path, base: str, name: str, **settings):
    """params/endpoint-example.yaml pointed at a fake server's `base` (no /v1), saved as `name` in tmp_path."""
    import yaml

    from lab.core import profiles

    example = Path(__file__).resolve().parent.parent / "params" / "endpoint-example.yaml"
    data = {**yaml.safe_load(example.read_text()), "name": name, "endpoint_url": base + "/v1", **settings}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return profiles.load(path)
