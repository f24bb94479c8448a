"""Issue 36, the server and secret items: what a profile flag, a strange endpoint or a hostile server's reply can do.

1. `server_args` that bind, expose or carry a secret (`--host 0.0.0.0`, `--api-key K`, in every spelling an engine
   accepts) are refused when the profile loads, naming the field to use instead, and in the FINAL argv before a
   server starts (a profile copy or a caller's flags skip the profile's validation);
2. redaction finds a key in every form a server or a library prints it (a trailing CR, upper case, JSON `\\/`,
   bytes reprs), before any excerpt cut (a repeated key no longer pulls part of the next into view);
3. every reply is capped in bytes: a gzip bomb, stacked or unbounded encodings, a Content-Length lie, an endless
   `data:` line, a huge error body; `endpoint.request` (which never raises) answers each with an error;
5. a server's own string (Ollama's /api/version) is text in notebook 04's Markdown and in report.html, never markup;
6. /v1/models with 10^5 models: discovery ends within its deadline; `redact` reads the environment once, not per string;
9. an HTML sign-in page answering 200 on every route is not "auth ok", "documented shape: pass" or "the served
   model answers";
11. `lab doctor`'s text carries no terminal escape (OSC 52 / OSC 8 / OSC 0, CSI of any kind, C1), only colours were
    stripped (the CLI itself: tests/tools/test_reliability_hostile_servers_tools.py).
FAKE servers (threads, tests/fake_endpoints.py) play the hostile endpoints. Each item prints tried / handled."""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from conftest import record_figure
from fake_endpoints import QuietJSONHandler, endpoint_profile, serving
from shared_reliability_hostile_servers import ESCAPES, KEY

from lab.core import deadline, profiles, redaction
from lab.core.server_flags import GUARDED_FLAGS
from lab.diagnose import endpoint_diagnose
from lab.diagnose.log_scan import strip_ansi
from lab.pages import serve as serve_page
from lab.serving import endpoint, engines, serve



# ---------------------------------------------------------------- 1. server_args
EXPOSING = [["--host", "0.0.0.0"], ["--host=0.0.0.0"], ["--hos", "0.0.0.0"], ["--port", "80"], ["--uds", "/tmp/s.sock"],
            ["--api-key", KEY], ["--api_key", KEY], ["--api-key-file", "/tmp/k"], ["--ssl-key-file", "/k.pem"],
            ["--ssl-certfile", "/c.pem"], ["--ssl_keyfile=/k.pem"], ["-hft", "hf_x"], ["--hf-token", "hf_x"],
            ["--cors-origins", "*"], ["--allowed-origins", '["*"]'], ["--allow-credentials"], ["--path", "/"],
            ["--config", "/tmp/v.yaml"], ["-b", "512", "--host", "::"]]


def test_server_args_that_bind_expose_or_carry_a_secret_are_refused_in_the_profile_and_the_final_argv():
    base = profiles.load("cpu-default").model_dump()
    tried = handled = 0
    for args in EXPOSING:
        tried += 1
        with pytest.raises(ValueError) as refused:
            profiles.Profile(**{**base, "server_args": args})
        said = str(refused.value)
        # the message names the profile field to use, or why the lab sets it itself
        field_named = any(f in said for f in ("`host:`", "`port:`", "`api_key_env:`", "HF_TOKEN", "TLS", "CORS",
                                              "static files", "vLLM reads more flags"))
        # the final argv: a copy skips validation (model_copy), a caller adds flags (extra_args)
        copied = profiles.load("cpu-default").model_copy(update={"server_args": args})
        final_refused = 0
        for cmd in (engines.build_command(copied, model_path="/m.gguf"),
                    engines.build_command(profiles.load("cpu-default"), model_path="/m.gguf", extra_args=args),
                    engines.build_command(profiles.load("cpu-vllm"), extra_args=args)):
            try:
                serve.check_argv(cmd)
            except serve.UnsafeBind as exc:
                final_refused += KEY not in str(exc)
        handled += field_named and KEY not in said and final_refused == 3
    for name in ("cpu-default", "cpu-vllm", "h200-x1", "v100-32g-x2-nvlink"):  # the lab's own flags pass
        serve.check_argv(engines.build_command(profiles.load(name), model_path="/m.gguf"))
    with pytest.raises(serve.UnsafeBind):  # start refuses before anything runs
        serve.start(engines.build_command(profiles.load("cpu-default").model_copy(
            update={"server_args": ["--host", "0.0.0.0"]}), model_path="/m.gguf"), log_dir="/nonexistent")
    record_figure("issue 36 item 1: server_args that bind/expose/carry a secret, refused in profile and final argv",
                  tried, handled, f"{len(GUARDED_FLAGS)} flags guarded")
    assert handled == tried


def test_a_refused_server_args_list_is_not_echoed_with_its_key(tmp_path):
    text = (profiles.paths.PARAMS / "cpu-default.yaml").read_text()
    path = tmp_path / "k.yaml"
    path.write_text(text.replace("name: cpu-default", "name: k") + f'\nserver_args: ["--api-key", "{KEY}"]\n')
    with pytest.raises(profiles.ProfileError) as refused:
        profiles.load(path)
    assert "api_key_env" in str(refused.value) and KEY not in str(refused.value)


# ---------------------------------------------------------------- 2. redaction
def test_redaction_finds_the_key_in_every_form_it_is_printed(monkeypatch):
    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY + "\r")  # a key with a trailing CR, as the probe set it
    crlf = KEY + "\r"
    forms = {"httpx's illegal header": f"Illegal header value b'Bearer {crlf}'",
             "bytes repr": repr(f"Bearer {crlf}".encode()), "str repr": repr(crlf),
             "upper-cased": f"bad key {KEY.upper()}", "lower-cased": f"bad key {KEY.lower()}",
             "JSON-escaped": json.dumps({"error": f"key {KEY} refused"}),
             "JSON with \\/": json.dumps({"error": f"key {KEY}"}).replace("/", "\\/"),
             "percent-encoded": "GET /?key=" + KEY.replace("/", "%2F"), "stripped": f"key={KEY};",
             "CR LF split": f"key {KEY}\r\nnext"}
    kept = {name: redaction.redact(text) for name, text in forms.items()}
    kept.update({f"{name} (key given)": redaction.redact(text.replace(KEY, KEY), crlf) for name, text in forms.items()})

    def leaks(text: str) -> bool:  # any 12 characters of the key, in any case
        low = text.lower()
        return any(KEY[i:i + 12].lower() in low for i in range(len(KEY) - 11))
    # before the cut: a repeated key shrinks to [REDACTED] and pulls the window's edge into view
    for n in (2, 5, 9, 17, 40):
        text = ("x" * 3 + KEY) * n
        for chars in (60, 120, 400):
            kept[f"excerpt of {chars} of {n} keys"] = redaction.redacted_excerpt(text, chars)
    leaked = [name for name, text in kept.items() if leaks(text)]
    record_figure("issue 36 item 2: forms of a key (CR, case, JSON, reprs, excerpt cuts) redacted", len(kept),
                  len(kept) - len(leaked), "leaked: " + ", ".join(leaked) if leaked else "")
    assert not leaked, leaked


# ---------------------------------------------------------------- 3. reply sizes
def _bomb() -> bytes:
    """One gzip member that decodes to 256 MiB of zeros (~256 KB sent)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zero = bytes(1 << 20)
    return b"".join(packer.compress(zero) for _ in range(256)) + packer.flush()


class _Huge(BaseHTTPRequestHandler):
    """Each path a way to send more than a client can hold."""

    bomb = b""

    def log_message(self, *args):
        pass

    def _head(self, status: int = 200, **headers) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()

    def _endless(self, unit: bytes) -> None:
        try:
            for _ in range(1 << 16):  # 4 GiB at most, stopped by the client long before
                self.wfile.write(unit)
        except OSError:
            pass

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/gzip-bomb":
            self._head(Content_Type="application/json", Content_Encoding="gzip", Content_Length=str(len(self.bomb)))
            return self.wfile.write(self.bomb)
        if path == "/gzip-twice":
            once = gzip.compress(b"{}")
            body = gzip.compress(once)
            self._head(Content_Type="application/json", Content_Encoding="gzip, gzip", Content_Length=str(len(body)))
            return self.wfile.write(body)
        if path == "/brotli":
            self._head(Content_Type="application/json", Content_Encoding="br", Content_Length="4")
            return self.wfile.write(b"\x00" * 4)
        if path == "/length-lie":
            self._head(Content_Type="application/json", Content_Length=str(10 ** 13))
            return self._endless(b" " * 65536)
        if path == "/no-length":
            self._head(Content_Type="application/json", Connection="close")
            return self._endless(b"[" + b"0," * 32767 + b"0]")
        return self.do_POST()

    def do_POST(self):
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/error-body"):
            self._head(500, Content_Type="text/plain", Connection="close")
            return self._endless(b"e" * 65536)
        self._head(Content_Type="text/event-stream", Connection="close")
        self.wfile.write(b"data: ")
        return self._endless(b"x" * 65536)  # an endless `data:` line


def test_every_read_from_a_server_is_capped_in_bytes():
    from lab.measure import loadgen

    routes = ("/gzip-bomb", "/gzip-twice", "/brotli", "/length-lie", "/no-length")
    handler = type("Huge", (_Huge,), {"bomb": _bomb()})
    results = {}
    with serving(handler) as base, httpx.Client(trust_env=False) as client:
        for route in routes:
            got = endpoint.request(client, "GET", base + route, limit=deadline.Deadline(60, route))  # never raises
            results[route] = got["error"] is not None and "ReplyTooLarge" in got["error"]
        for route in ("", "/error-body"):  # the load generator's streams: an endless line, an endless error body
            target = loadgen.Target(base + route, "m", max_tokens=4, timeout_s=60)
            res = loadgen.run_load(target, ["hi"], loadgen.LoadSpec(concurrency=1, max_requests=1, warmup_requests=0))
            one = res.results[0]
            results[f"stream {route or '/v1/completions'}"] = not one.success and "ReplyTooLarge" in (one.error or "")
    record_figure("issue 36 item 3: replies past the byte caps (bomb, encodings, length lie, endless line)",
                  len(results), sum(results.values()), "not handled: " + ", ".join(k for k, v in results.items() if not v)
                  if not all(results.values()) else f"cap {deadline.MAX_REPLY_BYTES >> 20} MiB, line "
                  f"{deadline.MAX_LINE_BYTES >> 20} MiB")
    assert all(results.values()), results


# ---------------------------------------------------------------- 5, 9: a server's strings and pages
MARKUP = "<img src=x onerror=alert(1)> ![x](http://203.0.113.9/x.png) [y](javascript:alert(2))\n- forged line"


class _Markup(QuietJSONHandler):
    def do_GET(self):
        if self.path == "/api/version":
            return self._send(200, {"version": MARKUP})
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "m", "owned_by": "library"}]})
        return self._send(404, {"error": "not found"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return self._send(200, {"choices": [{"index": 0, "text": " hi", "message": {"content": "hi"},
                                             "finish_reason": "length"}], "model": "m"})


def test_a_servers_own_strings_are_text_in_notebook_markdown_and_the_report(tmp_path):
    from lab.records.report import markdown_html

    with serving(_Markup) as base:
        prof = endpoint_profile(tmp_path, base, "markup", served_model="m")
        command = engines.build_command(prof)
        server = serve.Server(command, "markup")
        smoke = serve.smoke_test(server)
        found = endpoint.discover_server(server)
        checks = serve_page.serve_checks(None, server, smoke, None, discovery=found)
        record = serve_page.build_record(command, [], None, server, smoke, {}, None, checks, discovery=found)
    record["summary"]["health_s"] = 0.1
    text = serve_page.closing_text(record)
    html = markdown_html(text)
    results = {"the version reached the closing text": "onerror" in text,
               "no raw tag in the Markdown": not re.search(r"(?<!\\)<", text),  # `\<` is the text "<"
               "no image or link syntax in the Markdown": "![" not in text and "](" not in text,
               "no forged line": "\n- forged" not in text,
               "report: no element": "<img" not in html and "<a " not in html and "src=" not in html.replace("src=x", ""),
               "report: shown as text": "&lt;img src=x onerror=alert(1)&gt;" in html}
    record_figure("issue 36 item 5: a server's markup in notebook 04's Markdown and report.html, kept as text",
                  len(results), sum(results.values()))
    assert all(results.values()), (results, text, html)


class _SignIn(BaseHTTPRequestHandler):
    """A proxy's sign-in page: 200 and HTML on every route, whatever is asked."""

    def log_message(self, *args):
        pass

    def _page(self):
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        body = b"<!doctype html><html><body><form action=/login>Sign in</form></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page


def test_an_html_sign_in_page_answering_200_everywhere_is_not_the_api(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNIN_TEST_KEY", KEY)
    with serving(_SignIn) as base:
        prof = endpoint_profile(tmp_path, base, "signin", api_key_env="SIGNIN_TEST_KEY")
        found = endpoint.discover(prof.endpoint_base, KEY, prof.served_model)
        server = serve.Server(engines.build_command(prof), "signin", api_key=KEY)
        smoke = serve.smoke_test(server)
        checks = {c.name: c.status for c in serve_page.serve_checks(None, server, smoke, None, discovery=found)}
        probes = {p["probe"]: p for p in endpoint_diagnose.run(prof)["probes"]}
        unreachable = endpoint_diagnose.why_unreachable(prof)
    results = {"discovery: auth not ok": found["auth"] != "ok",
               "discovery: a finding names the page": any("not JSON" in f for f in found["findings"]),
               "04: documented shape not pass": checks["replies of the documented shape"] != "pass",
               "04: completions not pass": checks["/v1/completions answers"] != "pass",
               "07: reach not pass": probes["reach"]["severity"] != "pass",
               "07: model probe not run as passing": "model" not in probes or probes["model"]["severity"] != "pass",
               "07: no 'the served model answers'": all(p["verdict"] != "the served model answers" for p in probes.values()),
               "why_unreachable names the page": bool(unreachable) and "sign-in page" in unreachable}
    record_figure("issue 36 item 9: an HTML sign-in page answering 200 on every route, not taken for the API",
                  len(results), sum(results.values()))
    assert all(results.values()), (results, found["auth"], checks, probes)


# ---------------------------------------------------------------- 6. many models
def _models_handler(n: int):
    body = json.dumps({"object": "list", "data": [{"id": f"model-{i:06d}", "object": "model", "owned_by": "someone"}
                                                  for i in range(n)]}).encode()

    class Many(QuietJSONHandler):
        def do_GET(self):
            if self.path != "/v1/models":
                return self._send(404, {"error": "not found"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_POST = do_GET
    return Many


def test_discovery_of_a_hundred_thousand_models_ends_within_its_deadline_and_reads_the_environment_once(monkeypatch):
    reads = []
    real_copy = os.environ.copy
    monkeypatch.setattr(os.environ, "copy", lambda: reads.append(1) or real_copy(), raising=False)
    monkeypatch.setenv("MANY_MODELS_TEST_TOKEN", KEY)  # a changed environment: read again once
    with serving(_models_handler(100_000)) as base:
        found = endpoint.discover(base, KEY, "model-000005")
    models = found["probes"]["openai"]["models"]
    results = {"/v1/models read whole": models["error"] is None and found["facts"]["model_ids_listed"] == 100_000
               and len(found["facts"]["model_ids"]) == endpoint.MAX_MODEL_IDS,  # kept bounded in the record (issue 45)
               "within the discovery deadline": found["seconds"] < found["deadline_s"],
               "the served model found": found["facts"]["served_model_listed"] is True,
               "environment read at most twice for ~10^5 strings": len(reads) <= 2}
    record_figure("issue 36 item 6: /v1/models with 10^5 models", len(results), sum(results.values()),
                  f"{found['seconds']} s of {found['deadline_s']:g}; environment read {len(reads)} time(s)")
    assert all(results.values()), (results, models["error"], len(reads))


# ---------------------------------------------------------------- 11. terminal escapes
def test_doctor_text_carries_no_terminal_escape():
    from lab.diagnose import doctor, troubleshoot

    handled = 0
    for name, esc in ESCAPES.items():
        line = f"CUDA error: out of memory {esc} end"
        text = doctor.format_findings(troubleshoot.diagnose(line)) + strip_ansi(line)
        handled += not any(ch in text for ch in "\x1b\x07\x08\r\x9b\x9c\x9d")
    record_figure("issue 36 item 11: terminal escapes in a log, stripped from lab doctor's text", len(ESCAPES), handled)
    assert handled == len(ESCAPES)
