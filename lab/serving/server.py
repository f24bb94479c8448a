"""A server process the lab started (or an external one it talks to): its address, key and log, and how it is
stopped: SIGTERM, then SIGKILL, for its whole process group, by `stop()`, by leaving a `with` block, when the
`Server` is garbage-collected, at interpreter exit (atexit), and, on Linux, when the Python process that started it
dies without running any of those (PR_SET_PDEATHSIG). lab.serving.serve starts one and waits until it answers.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import time
import weakref
from pathlib import Path

from lab.core import evidence, redaction
from lab.serving import engine_logs
from lab.serving.engines import Command

_LIVE: "weakref.WeakSet[Server]" = weakref.WeakSet()
_ATEXIT = {"registered": False}


def pdeathsig_preexec(sig: int = signal.SIGTERM):
    """A preexec_fn that makes the kernel send `sig` to the server if this process dies (Linux).
    libc is loaded here, before fork; the child only makes one system call."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec():
        libc.prctl(pr_set_pdeathsig, sig)

    return preexec


def death_signal(command: Command) -> int:
    """What an orphaned server gets when the Python process that started it dies. llama-server: SIGKILL. The kernel
    sends the death signal each time the server's parent *thread* exits, so a killed multi-threaded kernel can send
    it twice; llama-server's second SIGTERM calls exit() inside its signal handler, which deadlocks when the first
    one's shutdown was inside free() (seen 2026-12-02 on a loaded CI clone: gdb showed signal_handler → exit →
    free waiting on the malloc lock held by the interrupted ~llama_vocab; the orphan lived on). It has nothing to
    save, so it is killed outright. Python engines (vLLM) get SIGTERM: they stop their engine processes on it."""
    return signal.SIGKILL if command.engine == "llama.cpp" else signal.SIGTERM


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (zombies excluded)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group_now(pgid: int) -> None:
    """Last-resort stop (garbage collection, interpreter exit): SIGTERM, 3 s, SIGKILL."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)


def stop_all() -> list[dict]:
    """Stop every server this Python process started and has not stopped yet (runs at exit too)."""
    return [srv.stop(timeout_s=5) for srv in list(_LIVE)]


def track(server: "Server") -> None:
    """Stop `server` at interpreter exit if nothing stopped it before."""
    _LIVE.add(server)
    if not _ATEXIT["registered"]:
        atexit.register(stop_all)
        _ATEXIT["registered"] = True


class Server:
    """A running server (or an external one): base_url, pid, log_path, api_key, stop()."""

    def __init__(self, command: Command, name: str, process: subprocess.Popen | None = None,
                 raw_log: Path | None = None, log_path: Path | None = None, api_key: str | None = None):
        self.command = command
        self.name = name
        self.process = process
        self.log_path = log_path
        self.api_key = api_key
        self.health_s: float | None = None
        self.started_utc = evidence.utc_now()
        self.stop_report: dict | None = None
        self.log_save_error: str | None = None  # the redacted log could not be written (a full disk)
        self._raw_log = raw_log
        self._finalizer = weakref.finalize(self, _kill_group_now, process.pid) if process else None

    def __repr__(self) -> str:  # never show the key
        state = "external" if self.process is None else ("running" if self.alive() else "stopped")
        return f"<Server {self.name} {self.command.engine} {self.base_url} pid={self.pid} {state}>"

    @property
    def base_url(self) -> str:
        return self.command.base_url

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def external(self) -> bool:
        return self.process is None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_text(self) -> str:
        """The server's log so far, secrets redacted ("" for an external server)."""
        path = self._raw_log if self._raw_log and self._raw_log.exists() else self.log_path
        if not path or not path.exists():
            return ""
        return self._redact(path.read_text(errors="replace"))

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def reported(self) -> dict:
        """What the server said about itself at start-up (engine_logs.parse_log on its log)."""
        return engine_logs.parse_log(self.command.engine, self.log_text())

    def _redact(self, text: str) -> str:
        return redaction.redact(text, self.api_key)

    def stop(self, timeout_s: float = 15.0) -> dict:
        """SIGTERM to the process group, wait up to `timeout_s`, then SIGKILL; copy the log (redacted)
        into the run folder. Returns what happened; calling it again returns the same report."""
        if self.stop_report is not None:
            return self.stop_report
        if self.process is None:
            self.stop_report = {"external": True, "stopped": False, "leftover_pids": []}
            return self.stop_report
        t0, pgid = time.monotonic(), self.process.pid
        exited_before = self.process.poll() is not None
        sent = None
        if not exited_before:
            sent = "SIGTERM"
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                sent = "SIGKILL"
                _signal_group(pgid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # The leader has exited, but its children may still be shutting down on the SIGTERM they got too
        # (vLLM's EngineCore and worker outlive the API server by a moment): give them the rest of
        # timeout_s before calling them leftovers and killing them.
        while group_members(pgid) and time.monotonic() - t0 < timeout_s:
            time.sleep(0.1)
        leftovers = group_members(pgid)
        if leftovers:  # a child that outlived its parent and the grace period: kill it, and say so
            _signal_group(pgid, signal.SIGKILL)
            time.sleep(0.2)
        self._finalizer.detach()
        _LIVE.discard(self)
        self._save_log()
        self.stop_report = {"pid": pgid, "returncode": self.process.returncode, "signal": sent,
                            "exited_before_stop": exited_before, "stop_s": round(time.monotonic() - t0, 3),
                            "leftover_pids": leftovers, "left_running": group_members(pgid),
                            "log_error": self.log_save_error}
        return self.stop_report

    def _save_log(self) -> None:
        if not self._raw_log or not self._raw_log.exists():
            return
        try:
            text = self._redact(self._raw_log.read_text(errors="replace"))
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            evidence.write_whole(self.log_path, text)
        except OSError as exc:  # a full disk: the raw log (it may hold a key) goes rather than stay unredacted
            self.log_save_error = f"{self.log_path.name} not written ({exc}); the raw log was removed"
        finally:
            self._raw_log.unlink(missing_ok=True)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False
