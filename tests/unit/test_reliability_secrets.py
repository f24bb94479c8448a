"""Secrets a server echoes: a FAKE hostile server (in a thread) puts the API key it was sent into every answer (a
500 body, a streamed error event, a reply's text and model name, its version); the smoke test (notebook 04's
record), discovery and the load generator (notebook 06's record) keep none of it, whether the key came from the
lab (the Server's / Target's key) or only from an environment variable whose name says it holds a key (a profile's
api_key_env). Figure: server answers carrying the key tried / results without the key."""
from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path


from conftest import record_figure
from fake_endpoints import QuietJSONHandler, endpoint_profile, serving

from lab.core import profiles, redaction
from lab.measure import loadgen, metrics
from lab.serving import endpoint, engines, serve
from lab.pages import serve as serve_page

KEY = "lab-test-key-Zq3x9VbN7mKp2Lr8Tw5Y"  # what the lab sends: long, and nothing else in a reply looks like it
ENV_KEY = "env-only-key-Hj4Ks8Pq2Xw6Nc1D"  # a key the lab only knows as the value of a profile's api_key_env


class _Echo(QuietJSONHandler):
    """Echoes the bearer token it got in every answer; `streamed` counts streaming requests (the first gets a
    500, the others a 200 stream whose first event is an error naming the key)."""

    streamed = 0
    lock = threading.Lock()

    def _key(self) -> str:
        return self.headers.get("Authorization", "").removeprefix("Bearer ") or ENV_KEY

    def do_GET(self):
        if self.path == "/version":  # as vLLM answers, with the key for a version
            return self._send(200, {"version": f"0.11.0+{self._key()}"})
        return self._send(500, f"Internal error: key {self._key()} was rejected by the upstream proxy")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if body.get("stream"):
            with self.lock:
                type(self).streamed += 1
                first = type(self).streamed == 1
            if first:
                return self._send(500, {"error": {"message": f"upstream refused Authorization: Bearer {self._key()}"}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps({'error': {'message': f'key {self._key()} over quota'}})}\n\n".encode())
            self.wfile.flush()
            return None
        if self.path == "/v1/completions":
            return self._send(500, {"error": f"invalid api key {self._key()}"})
        return self._send(200, {"model": self._key(), "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                                "choices": [{"index": 0, "message": {"content": f"your key is {self._key()}"},
                                             "finish_reason": "length"}]})


@contextmanager
def echo_server():
    with serving(type("Echo", (_Echo,), {"streamed": 0, "lock": threading.Lock()})) as base:
        yield base


def _profile(tmp_path: Path, base: str) -> profiles.Profile:
    return endpoint_profile(tmp_path, base, "echo-unit", api_key_env="ECHO_UNIT_API_KEY")


def _leaks(obj, *keys: str) -> list[str]:
    text = json.dumps(obj, default=str)
    return [k[:8] for k in keys if k in text or k[:12] in text]  # the whole key, or its first half after a cut


def test_redact_hides_given_keys_and_keyed_variables_only(monkeypatch):
    monkeypatch.setenv("MY_PROXY_TOKEN", ENV_KEY)
    monkeypatch.setenv("MY_PROXY_MODE", "long-enough-but-not-a-secret")
    text = f"got {KEY} and {ENV_KEY}; mode long-enough-but-not-a-secret; EOS token = 2"
    assert redaction.redact(text, KEY) == "got [REDACTED] and [REDACTED]; mode long-enough-but-not-a-secret; EOS token = 2"
    assert redaction.redacted_excerpt("x" * 10 + KEY, 15, KEY) == "x" * 10 + "[REDA"  # redacted, then cut
    assert redaction.redact_all({"a": [f"k={KEY}", 1, None], KEY: 2.5}, KEY) == {"a": ["k=[REDACTED]", 1, None], "[REDACTED]": 2.5}


def test_redact_while_another_thread_changes_the_environment(monkeypatch):
    """pytest sets and unsets PYTEST_CURRENT_TEST in its main thread while a server starts in another; reading
    os.environ for secrets then met a variable gone mid-iteration (KeyError in 8 vLLM tests of a loaded CI run)."""
    monkeypatch.setenv("MY_PROXY_TOKEN", ENV_KEY)
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            os.environ["LAB_TEST_CHURN_A"] = "x" * 9
            os.environ.pop("LAB_TEST_CHURN_A", None)

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(2000):
            assert redaction.redact(f"got {ENV_KEY}") == "got [REDACTED]"
    finally:
        stop.set()
        worker.join()
        os.environ.pop("LAB_TEST_CHURN_A", None)


def test_a_server_echoing_the_key_leaves_it_in_no_record(tmp_path, monkeypatch):
    monkeypatch.setenv("ECHO_UNIT_API_KEY", KEY)
    tried, clean, leaks = 0, 0, {}
    with echo_server() as base:
        prof = _profile(tmp_path, base)
        command = engines.build_command(prof)
        server = serve.Server(command, "echo", api_key=KEY)
        smoke = serve.smoke_test(server)
        found = endpoint.discover_server(server)
        checks = serve_page.serve_checks(None, server, smoke, None)
        record04 = serve_page.build_record(command, [], None, server, smoke, {}, None, checks, discovery=found)
        # the load generator: a 500 body, then streamed error events
        target = loadgen.Target(base, model="m", max_tokens=4, api_key=KEY)
        run = loadgen.run_load(target, loadgen.make_prompts(4, 8, seed=3), loadgen.LoadSpec(concurrency=1, max_requests=3))
        # a Target without the key: the server echoes the one it knows, which the lab holds in a key-named variable
        monkeypatch.setenv("ECHO_UNIT_PROXY_TOKEN", ENV_KEY)
        bare = loadgen.run_load(loadgen.Target(base, model="m", max_tokens=4), loadgen.make_prompts(3, 8, seed=4),
                                loadgen.LoadSpec(concurrency=1, max_requests=2, warmup_requests=0))
    assert smoke["completions"]["status"] == 500 and not smoke["completions"]["ok"]  # the error did come back...
    assert "[REDACTED]" in smoke["completions"]["error"] and "[REDACTED]" in smoke["chat"]["text"]  # ...redacted
    errors = [r.error for r in run.warmup + run.results] + [r.error for r in bare.results]
    assert errors[0].startswith("HTTP 500") and all("[REDACTED]" in e for e in errors), errors
    results = {"smoke test": smoke, "04_serve record": record04, "discovery": found,
               "load generator, key sent": [r.to_dict() for r in run.warmup + run.results],
               "load generator, summary": metrics.summarise(run.results, run.duration_s),
               "load generator, key only in a variable": [r.to_dict() for r in bare.results]}
    for name, result in results.items():
        tried += 1
        leaks[name] = _leaks(result, KEY, ENV_KEY)
        clean += not leaks[name]
    record_figure("server answers echoing the API key: results without the key", tried, clean,
                  f"leaks: {({k: v for k, v in leaks.items() if v}) or 'none'}")
    assert clean == tried, leaks
