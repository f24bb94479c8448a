"""Make the pitfalls happen for real, capture what the tools print, and diagnose it (notebook 07).

Each reproduction runs the real llama-server built by set-up, with the embedded SmolLM2 model on the
CPU (whatever the profile: these are problems of the tools, and the small model keeps each one to a
second or two), writes what it printed under `<run>/logs/repro/` and hands that text to
`lab.diagnose.troubleshoot.diagnose`. A reproduction is correct when the first finding is the entry the
pitfall belongs to. `lab doctor --run` skips logs/repro/, so errors made on purpose here never count
as the run's own problems.

    port = port_conflict(run_dir)        # two: the lab's pre-check, and llama-server's own bind error
    truncated = truncated_gguf(run_dir)
    print(lab.pages.troubleshoot.explain(truncated))

The GPU-only pitfalls cannot be produced on a CPU box; `diagnose_captured()` diagnoses real texts of
them kept in lab/data/captured_errors.yaml (excerpts of tests/troubleshoot_logs/, each with its source).
"""
from __future__ import annotations

import math
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from lab.core import deadline, evidence, facts, paths, profiles, redaction
from lab.core.deadline import Deadline
from lab.model import models
from lab.predict import kvcache
from lab.serving import engines, serve, shapes
from lab.diagnose import troubleshoot
from lab.serving.command import Command

REPRO_PROFILE = "cpu-default"  # the embedded model on llama-server, CPU only: seconds on any machine
REPRO_SUBDIR = "repro"  # under <run>/logs/: lab.diagnose.run_inputs.run_folder_inputs skips it by default
TAIL_LINES = 12
HEALTH_TIMEOUT_S = 60.0  # SmolLM2 loads in ~1-3 s on 2 cores; a failure shows in well under a second
SOURCE = "lab.diagnose.troubleshoot_repro (this run)"


# ================================================================ one reproduction
@dataclass


class Reproduction:
    """One pitfall made to happen: what was done, what the tool printed, and what the lab diagnosed."""

    id: str
    title: str
    did: str  # what the user did, in their words
    expected_entry: str
    command: str = ""  # the shell line that was run
    outcome: str = ""  # what happened: the exception, exit code or HTTP status
    error_text: str = ""  # the real text, last TAIL_LINES lines
    log: str | None = None  # where the full text is, relative to the run folder
    findings: list[dict] = field(default_factory=list)  # top findings, rank order (Finding.to_dict)
    seconds: float | None = None  # from starting the failing step to its error
    details: dict = field(default_factory=dict)  # numbers a reproduction measured (sizes, tokens, ...)
    skipped: str | None = None  # why it could not be tried here

    @property
    def diagnosed_as(self) -> str | None:
        return self.findings[0]["entry_id"] if self.findings else None

    @property
    def correct(self) -> bool:
        return self.skipped is None and self.diagnosed_as == self.expected_entry

    def to_record(self) -> dict:
        return {**asdict(self), "diagnosed_as": self.diagnosed_as, "correct": self.correct}


def repro_dir(run_dir: str | Path) -> Path:
    """<run>/logs/repro/: where the reproductions' logs go (not counted by `lab doctor --run`)."""
    path = Path(run_dir) / "logs" / REPRO_SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def _rel(run_dir: str | Path, path: Path) -> str:
    try:
        return path.relative_to(Path(run_dir)).as_posix()
    except ValueError:
        return str(path)


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _diagnosed(rep: Reproduction, text: str, keep: int = 3) -> Reproduction:
    """Fill error_text (tail) and findings from the full text the pitfall produced."""
    rep.error_text = _tail(redaction.redact(text))
    rep.findings = [f.to_dict() for f in troubleshoot.diagnose(text)[:keep]]
    return rep


def _setup_problem() -> str | None:
    """Why the reproductions cannot run here (set-up missing), or None."""
    try:
        paths.tool("llama-server")
        paths.embedded_model("smollm2")
    except (paths.SetupMissing, KeyError) as exc:
        return str(exc)
    return None


def _command(port: int, model: str | Path | None = None, set_flags: dict[str, str] | None = None,
             extra: tuple[str, ...] = ()) -> Command:
    """The default profile's llama-server command on `port` (CPU, embedded model), with the values of
    `set_flags` (e.g. {"-c": "256"}) replacing the profile's, and `extra` words appended as typed."""
    prof = profiles.load(profiles.resolve(REPRO_PROFILE))
    return engines.with_flags(engines.build_command(prof, port=port, model_path=model, extra_args=extra), set_flags or {})


def _skipped(rep: Reproduction) -> Reproduction | None:
    problem = _setup_problem()
    if problem:
        rep.skipped = f"set-up is missing here: {problem}"
        return rep
    return None


def _run_to_exit(argv: list[str], log_path: Path, timeout_s: float = 30.0) -> int | None:
    """Run a command that is expected to fail by itself; its output goes to `log_path`.
    Returns the exit code, or None when it was still running after `timeout_s` (then it is killed)."""
    with evidence.open_stream(log_path) as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, env=engines.minimal_env())
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return None


def _expect_startup_failure(rep: Reproduction, cmd: Command, run_dir: str | Path, name: str) -> Reproduction:
    """Start `cmd` through lab.serving.serve expecting StartupFailed; diagnose the server's whole log."""
    rep.command = cmd.shell(multiline=False)
    log_dir = repro_dir(run_dir)
    t0 = time.monotonic()
    try:
        with serve.start(cmd, log_dir=log_dir, name=name, health_timeout_s=HEALTH_TIMEOUT_S):
            rep.outcome = "the server started and answered: the pitfall did NOT happen here"
    except serve.StartupFailed as exc:
        rep.outcome = f"serve.StartupFailed: {str(exc).splitlines()[0]}"
    except serve.BadModelFile as exc:  # the lab's own pre-check refused the file before llama-server ran
        rep.outcome = f"serve.BadModelFile (the lab refused to start it): {exc}"
        rep.seconds = round(time.monotonic() - t0, 2)
        log = log_dir / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        evidence.write_whole(log, f"{exc}\n")
        rep.log = _rel(run_dir, log)
        return _diagnosed(rep, str(exc))
    rep.seconds = round(time.monotonic() - t0, 2)
    log = log_dir / f"{name}.log"
    rep.log = _rel(run_dir, log)
    return _diagnosed(rep, log.read_text(errors="replace") if log.exists() else "")


# ================================================================ the pitfalls
def port_conflict(run_dir: str | Path) -> list[Reproduction]:
    """A second server on the port of a running one: the lab's pre-check (serve.PortInUse), and the
    same start without the pre-check, so that llama-server's own bind error shows."""
    pre = Reproduction("port-conflict-precheck", "Port already in use (caught by the lab before starting)",
                       "started a second server on the port of one that was still running", "port-in-use")
    raw = Reproduction("port-conflict-llama-server", "Port already in use (llama-server's own error)",
                       "the same, starting llama-server by hand (no pre-check)", "port-in-use")
    if _skipped(pre):
        raw.skipped = pre.skipped
        return [pre, raw]
    port = serve.free_port()
    small = {"-c": "512", "-np": "1"}
    try:
        holder = serve.start(_command(port, set_flags=small), log_dir=repro_dir(run_dir), name="port-conflict-first",
                             health_timeout_s=HEALTH_TIMEOUT_S)
    except serve.ServeError as exc:
        pre.skipped = raw.skipped = f"the first server did not start: {str(exc).splitlines()[0]}"
        return [pre, raw]
    with holder:
        second = _command(port, set_flags=small)
        _second_through_lab(pre, second, run_dir)
        _second_by_hand(raw, second, run_dir)
    for rep in (pre, raw):
        rep.details = {"port": port, "holder_pid": holder.pid}
    return [pre, raw]


def _second_through_lab(rep: Reproduction, second: Command, run_dir: str | Path) -> Reproduction:
    out = repro_dir(run_dir)
    rep.command, text = second.shell(multiline=False), ""
    t0 = time.monotonic()
    try:
        with serve.start(second, log_dir=out, name="port-conflict-second", health_timeout_s=HEALTH_TIMEOUT_S):
            rep.outcome = "the second server started: the pitfall did NOT happen here"
    except serve.PortInUse as exc:
        rep.outcome, text = "serve.PortInUse raised before anything was started", str(exc)
    rep.seconds = round(time.monotonic() - t0, 2)
    log = out / "port-conflict-precheck.txt"
    evidence.write_whole(log, text + "\n")
    rep.log = _rel(run_dir, log)
    return _diagnosed(rep, text)


def _second_by_hand(rep: Reproduction, second: Command, run_dir: str | Path,
                    name: str = "port-conflict-llama-server") -> Reproduction:
    """Run the command without lab.serving.serve (no pre-checks), as a user typing it would: llama.cpp's own error."""
    rep.command = second.shell(multiline=False)
    log = repro_dir(run_dir) / f"{name}.log"
    t0 = time.monotonic()
    code = _run_to_exit(list(second.argv), log)
    rep.seconds = round(time.monotonic() - t0, 2)
    rep.outcome = f"llama-server exited with code {code}" if code is not None else "llama-server kept running (killed)"
    rep.log = _rel(run_dir, log)
    return _diagnosed(rep, log.read_text(errors="replace"))


def truncated_gguf(run_dir: str | Path, keep_mib: int = 50) -> Reproduction:
    """llama-server on the first `keep_mib` MiB of the SmolLM2 GGUF: a download that stopped early.
    The cut file lives in <run>/scratch/ only while the server tries it."""
    rep = Reproduction("truncated-gguf", "Truncated GGUF (an incomplete download)",
                       "served a model file whose download stopped early", "gguf-truncated")
    if _skipped(rep):
        return rep
    model = paths.embedded_model("smollm2")
    scratch = Path(run_dir) / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    cut = scratch / "truncated.gguf"
    size = model.stat().st_size
    keep = min(keep_mib << 20, size * 3 // 4)  # always cut something, whatever the model's size
    rep.did = (f"downloaded a model, the download stopped after {keep / 2**20:.0f} of {size / 2**20:.0f} MiB, "
               "and served the file anyway")
    with open(model, "rb") as src, evidence.open_stream(cut) as dst:
        dst.write(src.read(keep))
    rep.details = {"model_bytes": size, "kept_bytes": keep}
    cmd = _command(serve.free_port(), model=cut)
    try:
        # lab.serving.serve refuses this file before llama-server sees it (serve.check_model_file); what a user
        # typing the command meets is llama.cpp's own error, so the reproduction runs it by hand.
        try:
            serve.check_model_file(cmd)
        except serve.BadModelFile as exc:
            rep.details["lab_precheck"] = str(exc)
        return _second_by_hand(rep, cmd, run_dir, "truncated-gguf")
    finally:
        cut.unlink(missing_ok=True)  # tens of MiB of a broken model are not evidence worth keeping
        if not any(scratch.iterdir()):
            scratch.rmdir()


def rejected_flag(run_dir: str | Path, flag: tuple[str, ...] = ("--swap-space", "16")) -> Reproduction:
    """llama-server given a flag it does not know (the seed's vLLM `--swap-space 16` by default)."""
    rep = Reproduction("rejected-flag", f"A flag llama-server does not know ({' '.join(flag)})",
                       f"copied `{' '.join(flag)}` from a vLLM command (seed 000) onto llama-server",
                       "llamacpp-invalid-argument")
    if _skipped(rep):
        return rep
    return _expect_startup_failure(rep, _command(serve.free_port(), extra=flag), run_dir, "rejected-flag")


def _long_prompt(words: int) -> str:
    return " ".join(f"word{i % 100}" for i in range(words))


REPLY_DEADLINE_S = 120.0  # /tokenize and a 16-token completion of a ~300-word prompt on SmolLM2: seconds here


def _send_long_prompt(srv: serve.Server, prompt: str) -> tuple[list[int], httpx.Response]:
    """The prompt's tokens (the server's own /tokenize) and the server's answer to a completion of it."""
    limit = Deadline(REPLY_DEADLINE_S, "the long-prompt reproduction")
    with httpx.Client(timeout=60.0, trust_env=False, headers=srv.headers()) as client:
        tokenized = deadline.get(client, "POST", srv.base_url + "/tokenize", limit, {"content": prompt})
        tokens = (shapes.clean("tokenize", tokenized.json(), "POST /tokenize")[0] or {}).get("tokens") or []
        reply = deadline.get(client, "POST", srv.base_url + "/v1/completions", limit,
                             {"model": serve.model_name(srv, client, limit), "prompt": prompt, "max_tokens": 16},
                             per_read_s=limit.remaining())
    return tokens, reply


def context_overflow(run_dir: str | Path, context_tokens: int = 256, prompt_words: int = 300) -> Reproduction:
    """A request longer than the server's context: llama-server -c `context_tokens` -np 1, then a
    /v1/completions request whose prompt is several times that long. Captures the HTTP status and body
    (what the client sees) followed by the server's log."""
    rep = Reproduction("context-overflow", "Request longer than the server's context",
                       f"started the server with -c {context_tokens} and sent a prompt of {prompt_words} words",
                       "llamacpp-context-exceeded")
    if _skipped(rep):
        return rep
    out = repro_dir(run_dir)
    cmd = _command(serve.free_port(), set_flags={"-c": str(context_tokens), "-np": "1"})
    try:
        srv = serve.start(cmd, log_dir=out, name="context-overflow", health_timeout_s=HEALTH_TIMEOUT_S)
    except serve.ServeError as exc:
        rep.skipped = f"the server did not start: {str(exc).splitlines()[0]}"
        return rep
    t0 = time.monotonic()
    with srv:
        tokens, reply = _send_long_prompt(srv, _long_prompt(prompt_words))
    rep.seconds = round(time.monotonic() - t0, 2)
    response = f"HTTP {reply.status_code}\n{reply.text}"
    evidence.write_whole(out / "context-overflow.response.txt", response + "\n")
    server_log = (out / "context-overflow.log").read_text(errors="replace")
    rep.command = (f"{cmd.shell(multiline=False)}\ncurl {cmd.base_url}/v1/completions -d "
                   f"'{{\"prompt\": \"<{len(tokens)} tokens>\", \"max_tokens\": 16}}'")
    rep.outcome = f"HTTP {reply.status_code} for a {len(tokens)}-token prompt"
    rep.log = _rel(run_dir, out / "context-overflow.response.txt")
    rep.details = {"context_tokens": context_tokens, "prompt_tokens": len(tokens), "http_status": reply.status_code}
    _diagnosed(rep, response + "\n" + server_log)
    rep.error_text = _tail(response)  # the client's side is what the user sees first
    return rep


def _memory_bytes() -> int:
    import psutil

    return psutil.virtual_memory().total + psutil.swap_memory().total


def overcommit_problem() -> str | None:
    """Why an impossible allocation might not fail at once here (Linux always-overcommit), or None."""
    try:
        mode = Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return None
    if mode == "1":
        return ("this kernel always overcommits memory (vm.overcommit_memory=1): the allocation would succeed "
                "and the OOM killer would step in later, so the reproduction is not tried")
    return None


def kv_cache_too_big(run_dir: str | Path, times_memory: int = 8) -> Reproduction:
    """llama-server with a context whose KV cache is `times_memory` × this machine's RAM + swap.

    The context is sized with lab.predict.kvcache from the GGUF's own shape, so the prediction (KV bytes) can be
    set beside the allocation llama.cpp reports in its error."""
    rep = Reproduction("kv-cache-too-big", "Too little memory for the KV cache",
                       f"asked for a context whose KV cache is {times_memory}x this machine's memory",
                       "llamacpp-kv-alloc-failed")
    if _skipped(rep):
        return rep
    problem = overcommit_problem()
    if problem:
        rep.skipped = problem
        return rep
    arch = models.from_gguf(paths.embedded_model("smollm2"))
    per_token = kvcache.kv_bytes_per_token(arch, "f16")
    memory = _memory_bytes()
    pad = kvcache.LLAMA_CPP_CTX_PAD
    n_ctx = math.ceil(times_memory * memory / per_token / pad) * pad
    if n_ctx > 2**31 - 1:  # llama.cpp's n_ctx is a 32-bit int
        rep.skipped = f"this machine's memory ({memory / 1e12:.1f} TB) is too large to exceed with one context"
        return rep
    predicted = kvcache.kv_cache_bytes(arch, n_ctx, 1, "f16")
    rep.did = (f"asked for -c {n_ctx:,} (KV cache {predicted / 1e9:,.0f} GB) on a machine with "
               f"{memory / 1e9:,.0f} GB of RAM + swap")
    rep = _expect_startup_failure(rep, _command(serve.free_port(), set_flags={"-c": str(n_ctx), "-np": "1"}),
                                  run_dir, "kv-cache-too-big")
    log_text = (Path(run_dir) / rep.log).read_text(errors="replace") if rep.log else ""
    sizes = [int(m) for m in re.findall(r"failed to allocate \w+ buffer of size (\d+)", log_text)]
    rep.details = {"n_ctx": n_ctx, "kv_bytes_per_token": per_token, "predicted_kv_bytes": predicted,
                   "llama_cpp_attempted_bytes": sizes[0] if sizes else None, "memory_bytes": memory,
                   "prediction_matches": (sizes[0] == predicted) if sizes else None}
    return rep


# ================================================================ the GPU-only pitfalls, from captured text
def captured_examples() -> list[dict]:
    """lab/data/captured_errors.yaml: real texts of pitfalls a CPU machine cannot produce."""
    return facts.load("captured_errors", "examples")["examples"]


def diagnose_captured(examples: list[dict] | None = None) -> list[dict]:
    """Each captured text diagnosed: expected entry, the first finding, and its cause, fix and source."""
    rows = []
    for ex in examples if examples is not None else captured_examples():
        found = troubleshoot.match_text(ex.get("text") or "", ex.get("facts"))
        top = found[0] if found else None
        rows.append({"pitfall": ex["pitfall"], "expected": ex["entry"], "diagnosed": top.entry_id if top else None,
                     "correct": bool(top and top.entry_id == ex["entry"]), "kind": ex["kind"],
                     "seen": top.evidence if top else (ex.get("text") or ""),
                     "cause": top.cause if top else None, "fix": top.fix if top else None,
                     "entry_source": "\n".join(top.source) if top else None, "text_source": ex["source"]})
    return rows
