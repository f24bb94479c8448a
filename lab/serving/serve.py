"""Run a server as a real process on this machine, wait until it answers, and stop it cleanly.

    cmd = engines.build_command(profile)
    with serve.start(cmd, log_dir=run_dir / "logs", name="04_serve") as srv:
        serve.smoke_test(srv)

What it guarantees:
- the port is checked *before* starting (`PortInUse` names the port, what holds it, and the fix);
- the final argv binds only where the command says and carries no key (`check_argv`: lab.core.server_flags);
- a host other than loopback is refused unless the command names an API-key variable that holds a key of
  at least engines.MIN_API_KEY_CHARS characters; on loopback too the server gets a key: the profile's, or a
  per-run random one (`run_api_key`), so no other program or web page on this machine can use it;
- the model file is checked before the engine is asked to load it (lab.model.gguf_file.gguf_problem: truncated,
  empty, not GGUF, an architecture or tensor type the pinned llama.cpp does not know);
- the server gets a minimal environment (engines.minimal_env): no HF_TOKEN, OPENAI_API_KEY & co.;
- start-up waits for `/health` (llama-server answers 503 while loading) and then a 1-token request;
  an early exit or a timeout raises `StartupFailed` with the tail of the server's log;
- the server runs in its own process group and is stopped with SIGTERM, then SIGKILL, for the whole
  group (lab.serving.server.Server: by `stop()`, by leaving a `with` block, also on an exception or
  KeyboardInterrupt, at exit, when the starting process dies);
- the log goes to `<log_dir>/.<name>.log.partial` (owner-only) while the server runs and is copied,
  secrets redacted, to `<log_dir>/<name>.log` when it stops (the partial file is then removed).
A server the user runs (an endpoint profile's `endpoint_url`, or the older `engine: external` with host and
port) is not started: `connect` only checks that it answers; lab.serving.endpoint asks it what it is.
Notebook 04's checks, record and closing text over all of this: lab.pages.serve.
"""
from __future__ import annotations

import errno
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from lab.core import deadline, display, evidence, interrupt, redaction
from lab.core.deadline import Deadline
from lab.core.server_flags import GUARDED_FLAGS, guarded_flag
from lab.core.ports import free_port  # the pick every server start here uses; callers say serve.free_port
from lab.serving import engine_logs, engines, shapes
from lab.serving.engines import LOOPBACK, Command
from lab.serving.server import Server, death_signal, pdeathsig_preexec, track
from lab.core.profiles import Profile

DEFAULT_HEALTH_TIMEOUT_S = 120.0  # a 27B GGUF from a cold disk takes tens of seconds; SmolLM2 ~1-3 s
# vLLM imports torch, spawns an engine core and a worker, loads and profiles the model: 35-82 s here for
# SmolLM2 on 2 CPU cores with --enforce-eager, ~100-125 s with torch.compile (seen here, 2026-11-29); a 27B on GPUs
# compiles CUDA graphs too. Generous, because a timeout kills a server that was about to answer: the first start of
# the Qwen3.8-27B stand-in on an H100 (vLLM 0.25.0, 2026-12-07, outputs/h100-vllm/) loaded in 6 s, spent 136 s in
# torch.compile and was still JIT-compiling FlashInfer's Gated DeltaNet prefill when the old 420 s ran out. A server
# that dies is seen at once (its process exits), so the long wait only costs time when one hangs.
VLLM_HEALTH_TIMEOUT_S = 1200.0


def health_timeout_for(command: Command) -> float:
    """How long `start` waits for the server to answer: longer for vLLM than for llama.cpp."""
    return VLLM_HEALTH_TIMEOUT_S if command.engine == "vllm" else DEFAULT_HEALTH_TIMEOUT_S
SMOKE_PROMPT = "The capital of France is"
SMOKE_CHAT = "Say hello in five words."


class ServeError(RuntimeError):
    """The server could not be started or reached; the message says why and what to do."""


class PortInUse(ServeError):
    pass


class UnsafeBind(ServeError):
    pass


class BadModelFile(ServeError):
    """The model file cannot be loaded; found before the engine was started."""


class StartupFailed(ServeError):
    """The process exited early or never became healthy; `log_tail` holds the server's last lines."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(f"{message}\n--- last lines of the server log ---\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail


# ---------------------------------------------------------------- ports and binding
def port_holder(port: int) -> str | None:
    """'pid 1234 (llama-server: llama-server -m …)' for the process listening on `port`, if findable."""
    try:
        import psutil

        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                cmdline = display.clip(redaction.redact(" ".join(proc.cmdline())), 160)
                return f"pid {conn.pid} ({proc.name()}: {cmdline})"
    except Exception:  # permissions, a process that just exited: the holder is a nicety, not a need
        return None
    return None


def check_port_free(host: str, port: int) -> None:
    """Raise PortInUse when `host:port` cannot be bound (something already listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR too, so a port left in TIME_WAIT is not reported as busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
    holder = port_holder(port)
    raise PortInUse(
        f"port {port} on {host} is already in use{' by ' + holder if holder else ''}. "
        f"Fix: stop that process{' (kill ' + holder.split()[1] + ')' if holder else ''}, or use another port: "
        f"set `port:` in the profile, or pass port=serve.free_port() to engines.build_command().")


_PROCESS_KEY: dict[str, str] = {}


def run_api_key() -> str:
    """The key the lab's own servers get when the profile names none: the runner's per-run key (handed to
    kernels in engines.RUN_KEY_ENV), else one random key for this Python process."""
    return os.environ.get(engines.RUN_KEY_ENV) or _PROCESS_KEY.setdefault("key", secrets.token_urlsafe(24))


def check_bind_allowed(command: Command) -> None:
    """Refuse a non-loopback host unless the command names an API-key variable holding a strong key."""
    if command.host in LOOPBACK:
        return
    if not command.api_key_env:
        raise UnsafeBind(f"refusing to bind {command.host}:{command.port}: that exposes the server to the network "
                         "and the profile sets no api_key_env. Fix: use host 127.0.0.1, or set api_key_env "
                         "to the name of an environment variable holding a key.")
    fix = ("Fix: export " + command.api_key_env + '="$(python3 -c \'import secrets; print(secrets.token_urlsafe(24))\')"'
           ", or use host 127.0.0.1.")
    named = redaction.key_variable_problem(command.api_key_env)  # a command built from an unchecked profile copy too
    if named:
        raise UnsafeBind(f"refusing to bind {command.host}:{command.port}: api_key_env {named}. {fix}")
    key = os.environ.get(command.api_key_env) or ""
    if not key:
        raise UnsafeBind(f"refusing to bind {command.host}:{command.port}: the profile's api_key_env "
                         f"{command.api_key_env} is not set in this environment. {fix}")
    weak = redaction.key_value_problem(key)
    if weak:  # the value is never said: only what is wrong with it
        raise UnsafeBind(f"refusing to bind {command.host}:{command.port}: the key in {command.api_key_env} does not "
                         f"look like a secret: {weak}. {fix}")


def check_argv(command: Command) -> None:
    """Refuse a final argv that binds elsewhere than the command says or carries a secret (lab.core.server_flags): the
    profile's server_args are checked when it loads, but a profile copy, a caller's extra flags or `with_flags` reach
    argv too, and the last `--host` is the one the engine uses. Allowed: the builder's own `--host <host>`,
    `--port <port>` and llama-server's `--cors-origins localhost`, once each."""
    argv, own = list(command.argv), {"--host": command.host, "--port": str(command.port), "--cors-origins": "localhost"}
    seen = set()
    for i, word in enumerate(argv):
        flag = guarded_flag(word)
        if flag is None:
            continue
        if word in own and flag not in seen and i + 1 < len(argv) and argv[i + 1] == own[word]:
            seen.add(flag)
            continue
        raise UnsafeBind(f"refusing to start {command.engine}: its command holds {word!r} "
                         f"{'again ' if flag in seen else ''}(binds, exposes or carries a secret); {GUARDED_FLAGS[flag]}")


def check_model_file(command: Command) -> None:
    """Raise BadModelFile when llama.cpp's `-m` file cannot be a model it loads (see gguf_file.gguf_problem)."""
    if command.engine != "llama.cpp" or "-m" not in command.argv:
        return
    from lab.model import gguf_file

    problem = gguf_file.gguf_problem(command.argv[command.argv.index("-m") + 1])
    if problem:
        raise BadModelFile(f"not starting {command.engine}: {problem}")


# ---------------------------------------------------------------- start, connect, wait
def start(command: Command, log_dir: str | Path, name: str = "server",
          health_timeout_s: float | None = None) -> Server:
    """Start `command` on this machine and return once it serves a 1-token completion.

    Raises PortInUse / UnsafeBind before starting anything, StartupFailed (with the log tail) when the
    process exits early or is not healthy within `health_timeout_s` (default: `health_timeout_for`; the
    process is stopped first). For an external command nothing is started: see `connect`.
    """
    health_timeout_s = health_timeout_s or health_timeout_for(command)
    if command.external:
        return connect(command, timeout_s=min(health_timeout_s, 30.0))
    check_argv(command)
    check_bind_allowed(command)
    check_port_free(command.host, command.port)
    check_model_file(command)
    api_key = os.environ.get(command.api_key_env) if command.api_key_env else None
    api_key = api_key or (run_api_key() if command.engine in engines.API_KEY_VARIABLE else None)
    log_path = Path(log_dir) / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    raw = log_path.with_name(f".{name}.log.partial")  # owner-only until redacted into <name>.log
    try:
        with evidence.open_stream(raw, private=True) as log_fh:
            process = subprocess.Popen(list(command.argv), stdin=subprocess.DEVNULL, stdout=log_fh,
                                       stderr=subprocess.STDOUT, env=engines.env_with_secrets(command, api_key=api_key),
                                       start_new_session=True, preexec_fn=pdeathsig_preexec(death_signal(command)),
                                       close_fds=True)
    except FileNotFoundError as exc:
        Path(raw).unlink(missing_ok=True)
        raise StartupFailed(f"cannot start {command.argv[0]!r}: {exc.strerror}. Fix: run `make setup` "
                            "(llama.cpp tools) or install the engine named in the profile.") from None
    server = Server(command, name, process, Path(raw), log_path, api_key)
    track(server)
    interrupt.cut_point("server-start")  # tests: a run cut while its server loads (raw log still open)
    try:
        server.health_s = wait_until_healthy(server, health_timeout_s)
    except BaseException:
        server.stop(timeout_s=5)
        raise
    return server


def measure(command: Command, log_dir: str | Path, name: str, how, monitor=None,
            health_timeout_s: float | None = None) -> dict:
    """Start `command`, hand the server to `how(server)` (it returns the measured fields), stop the server:
    one row of a sweep over server settings (lab.tune, lab.speculative, lab.multigpu's modes). A setting the build or
    the model refuses is a result, not a crash: status "failed", error = what the engine's log says (or the exception),
    log_tail. Every row has command, status, error, load_s (None if it never served) and seconds."""
    t0 = time.monotonic()
    row = {"command": command.shell(), "status": "ok", "error": None, "load_s": None}
    srv = None
    try:
        srv = start(command, log_dir=log_dir, name=name, health_timeout_s=health_timeout_s)
        row["load_s"] = round(time.monotonic() - t0, 2)
        if monitor is not None:
            monitor.watch(srv.pid)
        row.update(how(srv))
    except Exception as exc:  # noqa: BLE001 - a refused setting is a measurement ("the server would not start")
        # a server that failed to start has already been stopped by `start`, its log saved (redacted)
        log = Path(log_dir) / f"{name}.log"
        text = srv.log_text() if srv is not None else (log.read_text(errors="replace") if log.exists() else "")
        # the engine's words only when it died: an exception while it serves is the client's or the load's
        said = engine_logs.failure_said(command.engine, text) if srv is None or not srv.alive() else []
        row.update(status="failed", error=display.clip("; ".join(said) or f"{type(exc).__name__}: {exc}", 400),
                   log_tail="\n".join(text.splitlines()[-15:]))
    finally:
        if srv is not None:
            srv.stop()
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def connect(command: Command, timeout_s: float = 10.0, name: str = "external") -> Server:
    """An external server: nothing is started; raise StartupFailed unless it answers within `timeout_s`."""
    api_key = os.environ.get(command.api_key_env) if command.api_key_env else None
    server = Server(command, name, api_key=api_key)
    server.health_s = wait_until_healthy(server, timeout_s)
    return server


def wait_until_healthy(server: Server, timeout_s: float) -> float:
    """Poll the health route until 200, then send a 1-token completion; return the seconds it took. All of it
    within `timeout_s` overall (lab.core.deadline: a health route that trickles its answer does not extend it),
    the 1-token completion at least FIRST_TOKEN_MIN_S."""
    t0 = time.monotonic()
    url = server.base_url + server.command.health_path
    limit = Deadline(timeout_s, f"health wait on {url}")
    last = "no answer yet"
    with httpx.Client(timeout=5.0, trust_env=False, headers=server.headers()) as client:
        while True:
            if server.process is not None and server.process.poll() is not None:
                raise StartupFailed(f"{server.command.engine} exited with code {server.process.returncode} "
                                    f"{time.monotonic() - t0:.1f} s after start, before answering {url}",
                                    server.log_tail())
            if limit.expired:
                raise StartupFailed(f"{url} did not answer 200 within {timeout_s:.0f} s (last: {last}). "
                                    "Fix: a large model needs a longer health_timeout_s; otherwise read the log",
                                    server.log_tail())
            try:
                reply = deadline.get(client, "GET", url, limit, per_read_s=5.0)
                if reply.status_code == 200:
                    break
                last = f"HTTP {reply.status_code} {redaction.redacted_excerpt(reply.text, 120, server.api_key)!r}"  # llama-server: 503 while loading
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {server._redact(str(exc))}"
            time.sleep(0.1)  # a small model on 2 cores is up in ~0.5 s; the suite starts ~35 servers
        _first_token(server, client, Deadline(max(FIRST_TOKEN_MIN_S, limit.remaining()), "the first 1-token completion"))
    return round(time.monotonic() - t0, 3)


# The 1-token request after health gets what is left of the health wait, but at least this: a server that was
# healthy just before the wait's end still answers one token in seconds.
FIRST_TOKEN_MIN_S = 10.0


def _first_token(server: Server, client: httpx.Client, limit: Deadline) -> None:
    body = {"model": model_name(server, client, limit), "prompt": "Hi", "max_tokens": 1, "temperature": 0}
    try:
        reply = deadline.get(client, "POST", server.base_url + "/v1/completions", limit, body,
                             per_read_s=limit.remaining())
    except httpx.TransportError as exc:
        raise StartupFailed(f"health answered but a 1-token completion failed: {server._redact(str(exc))}",
                            server.log_tail()) from None
    if reply.status_code != 200:
        raise StartupFailed(f"health answered but a 1-token completion got HTTP {reply.status_code}: "
                            f"{redaction.redacted_excerpt(reply.text, 300, server.api_key)}", server.log_tail())


MODEL_NAME_S = 10.0  # GET /v1/models for the name to send, when the profile does not give one


def model_name(server: Server, client: httpx.Client | None = None, limit: Deadline | None = None) -> str:
    """The `model` field to send: the served name, or the first id the server lists (its reply checked against
    lab.serving.shapes; anything else: "default")."""
    if server.command.served_model:
        return server.command.served_model
    own = client is None
    client = client or httpx.Client(timeout=10.0, trust_env=False, headers=server.headers())
    limit = (limit or Deadline(None, "model name")).sooner(MODEL_NAME_S, "GET /v1/models")
    try:
        data, _ = shapes.clean("models", deadline.get(client, "GET", server.base_url + "/v1/models", limit).json(),
                               "GET /v1/models")
        ids = [m.get("id") for m in (data or {}).get("data") or [] if m.get("id")]
        return ids[0] if ids else "default"
    except (httpx.HTTPError, ValueError, RecursionError):
        return "default"
    finally:
        if own:
            client.close()


# ---------------------------------------------------------------- smoke test
def _call(client: httpx.Client, url: str, body: dict, limit: Deadline, api_key: str | None = None) -> dict:
    t0 = time.monotonic()
    route = "POST " + urlsplit(url).path
    try:
        reply = deadline.get(client, "POST", url, limit, body, per_read_s=limit.remaining())
    except httpx.HTTPError as exc:
        return {"ok": False, "status": None, "latency_s": round(time.monotonic() - t0, 3), "text": "",
                "usage": None, "finish_reason": None, "findings": [],
                "error": f"{type(exc).__name__}: {redaction.redact(str(exc), api_key)}"}
    latency = round(time.monotonic() - t0, 3)
    try:
        raw = reply.json()
    except (ValueError, RecursionError):
        raw = None
    data, findings = shapes.clean("completion", raw, route) if reply.status_code == 200 else (None, [])
    if reply.status_code == 200 and raw is None:  # a sign-in page answering 200: not of the documented shape
        findings = [shapes.not_json(route, reply.headers.get("content-type"))]
    choices = (data or {}).get("choices") or [{}]
    choice = choices[0]
    text = choice.get("text") if "text" in choice else (choice.get("message") or {}).get("content")
    ok = reply.status_code == 200 and isinstance(text, str)
    return {"ok": ok, "status": reply.status_code, "latency_s": latency, "text": text or "",
            "usage": (data or {}).get("usage"), "finish_reason": choice.get("finish_reason"),
            "model": (data or {}).get("model"), "findings": findings,
            "error": None if ok else redaction.redacted_excerpt(reply.text, 300, api_key)}


SMOKE_DEADLINE_S = 120.0  # both smoke requests together (and the model-name lookup): 16 tokens each, twice


def smoke_test(server: Server, max_tokens: int = 16, timeout_s: float = SMOKE_DEADLINE_S) -> dict:
    """One /v1/completions and one /v1/chat/completions request (greedy); what came back and how fast. Both
    within `timeout_s` overall: a server that trickles or never finishes its reply fails the test, not the wait."""
    limit = Deadline(timeout_s, "smoke test")
    with httpx.Client(timeout=timeout_s, trust_env=False, headers=server.headers()) as client:
        model = model_name(server, client, limit)
        completions = _call(client, server.base_url + "/v1/completions",
                            {"model": model, "prompt": SMOKE_PROMPT, "max_tokens": max_tokens, "temperature": 0},
                            limit, server.api_key)
        chat = _call(client, server.base_url + "/v1/chat/completions",
                     {"model": model, "messages": [{"role": "user", "content": SMOKE_CHAT}],
                      "max_tokens": max_tokens, "temperature": 0}, limit, server.api_key)
    completions["prompt"], chat["prompt"] = SMOKE_PROMPT, SMOKE_CHAT
    # every string in it is the server's (its reply, its error, its model name): one redaction for all of them
    return redaction.redact_all({"model": model, "completions": completions, "chat": chat}, server.api_key)


# ---------------------------------------------------------------- can this machine start it?
def why_not_startable(profile: Profile, command: Command) -> str | None:
    """None when this machine can run the command, else the reason (a GPU profile on a CPU box...)."""
    from lab.core import planmode

    plan = planmode.reason(profile)
    if plan:  # plan mode: no server is started (an endpoint profile's server is not contacted either)
        return f"{plan}. The server command notebook 04 shows (the report: Commands) is what to run on that machine."
    if command.external:
        return None
    if profile.gpu_count > 0:
        gpus = evidence.gpu_summary()
        if len(gpus["gpus"]) < profile.gpu_count:
            return (f"profile {profile.name} needs {profile.gpu_count} GPU(s) matching "
                    f"{profile.gpu_name_pattern!r}; this machine has {len(gpus['gpus'])}"
                    f"{' (' + gpus['reason'] + ')' if gpus.get('reason') else ''}. "
                    "The server command notebook 04 shows (the report: Commands) is what to run on that machine.")
    if command.problems:
        return "the command has problems no flag fixes: " + "; ".join(n.text for n in command.problems)
    exe = command.argv[0]
    if not (Path(exe).exists() or shutil.which(exe)):
        return f"{exe} is not on this machine: run `make setup` (llama.cpp) or install the engine"
    if profile.engine in ("vllm", "llama-cpp-python") and engines.installed_version(profile) is None:
        return f"{profile.engine} is not installed for {profile.engine_python or 'this Python'}"
    return None


def why_not_flag_sweep(profile: Profile) -> str | None:
    """Why this machine cannot sweep llama-server's flags for this profile (None: it can) — lab tune and the
    speculative variants start the server themselves, so they need the llama.cpp engine started by the lab and a
    server that can start here."""
    if profile.engine != "llama.cpp" or getattr(profile, "endpoint_url", None):
        return (f"lab tune varies llama-server's flags; profile {profile.name} uses "
                f"{'an endpoint it does not start' if getattr(profile, 'endpoint_url', None) else profile.engine}")
    return why_not_startable(profile, engines.build_command(profile, port=free_port()))
