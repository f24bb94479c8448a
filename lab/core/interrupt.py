"""SIGTERM, SIGHUP and SIGQUIT unwind like Ctrl-C: `lab run` and every verb turn each into one line and exit 130 /
143 / 129 / 131.

Standard library only and imported first by `.venv/bin/python -m lab`, so the handler is in place before the heavy
imports (pandas, pydantic, papermill) that take seconds on a busy machine.

SIGHUP (the terminal closed) is handled like SIGTERM: without a handler it kills the run on the spot, leaving
no manifest, raw logs and the kernel's connection file. Under `nohup` (SIGHUP ignored) it stays ignored: the
run is meant to outlive the terminal.

SIGQUIT (Ctrl-\\) would otherwise end the process on the spot with a core dump: no manifest, so the run was
reported as killed. It is handled like SIGTERM: the run stops, writes its manifest ("interrupted") and its report.

Named cut points (`cut_point`) let tests cut `lab run` at a chosen place instead of at a random time."""
from __future__ import annotations

import logging
import os
import signal

from lab.core.exit_codes import SIGNALS as SIGNAL_EXIT  # noqa: E402 - the one exit-code table
# The signals that end a run like Ctrl-C (besides SIGINT itself, which Python already raises as KeyboardInterrupt).
UNWINDING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so papermill and the runner unwind the same way for all three."""

    signal_name = "SIGTERM"


class Hangup(Terminated):
    """SIGHUP: the terminal that started the run was closed."""

    signal_name = "SIGHUP"


class Quit(Terminated):
    """SIGQUIT: Ctrl-\\ in the terminal, or `kill -QUIT`."""

    signal_name = "SIGQUIT"


def raise_for(signum: int) -> KeyboardInterrupt:
    """The exception a cut by `signum` raises."""
    return {signal.SIGTERM: Terminated, signal.SIGHUP: Hangup, signal.SIGQUIT: Quit}.get(signum, KeyboardInterrupt)()


def raise_terminated(signum, _frame):
    raise raise_for(signum)


def install() -> dict:
    """Make SIGTERM raise Terminated, SIGHUP Hangup (unless it is ignored: nohup) and SIGQUIT Quit; return the
    previous handlers, for `restore_handlers`."""
    old = {}
    for sig in UNWINDING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, raise_terminated)
    return old


def restore_handlers(old: dict) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)


def ignore_cuts() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP do nothing: a cut's bounded clean-up, or a finished verb's exit."""
    for sig in (signal.SIGINT, *UNWINDING):
        signal.signal(sig, signal.SIG_IGN)


def name_of(exc: BaseException) -> str:
    return getattr(exc, "signal_name", "SIGINT")


# Loggers whose reports of a cut are the cut's own echo: nbclient (through papermill's logger) says "Kernel died
# while waiting for execute reply" when the signal lands in its reply wait, and asyncio prints "Task exception was
# never retrieved" with a traceback when that task is collected. The run says what happened in one line.
ECHO_LOGGERS = ("papermill", "asyncio")


class CutWatch(logging.Filter):
    """While `lab run` runs: SIGINT raises KeyboardInterrupt, SIGTERM Terminated and SIGHUP Hangup (unless it was
    ignored: nohup), as everywhere; from the first signal on, further signals are ignored (a second Ctrl-C must
    not cut the clean-up, which is bounded) and the ECHO_LOGGERS are silent. `restore()` puts the previous
    handlers back; after a cut the filter stays (the process is ending, and asyncio reports collected tasks late)."""

    def __init__(self):
        super().__init__()
        self.cut = False
        self._old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, *UNWINDING)
                     if signal.getsignal(sig) is not signal.SIG_IGN}
        for name in ECHO_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def _on_signal(self, signum, _frame):
        self.cut = True
        ignore_cuts()  # before raising: no window in which a second signal cuts the clean-up
        raise raise_for(signum)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.cut

    def restore(self) -> None:
        restore_handlers(self._old)
        if not self.cut:
            for name in ECHO_LOGGERS:
                logging.getLogger(name).removeFilter(self)


# ---------------------------------------------------------------- named cut points (tests)
# LAB_TEST_CUT_AT=<point> makes `lab run` send LAB_TEST_CUT_SIGNAL (SIGINT, SIGTERM or SIGHUP; default SIGINT) to
# itself when it reaches that point, so tests cut a run at every place that matters, each on purpose, instead of
# at a clock-seeded random second (tests/notebooks/test_reliability_interrupts.py). The runner writes its pid into
# LAB_TEST_CUT_PID, which its notebook kernels inherit: a point inside a kernel (server start, mid-benchmark)
# signals the runner, as a Ctrl-C would. Unset (every real run) a point costs one dictionary look-up.
CUT_AT_ENV, CUT_SIGNAL_ENV, CUT_PID_ENV = "LAB_TEST_CUT_AT", "LAB_TEST_CUT_SIGNAL", "LAB_TEST_CUT_PID"
CUT_POINTS = ("notebook-start:NN", "server-start", "mid-benchmark", "notebook-end:NN", "manifest", "report",
              "report-check")


def cut_point(name: str) -> None:
    """A named point of `lab run` (CUT_POINTS; NN is a notebook's two-digit prefix): when LAB_TEST_CUT_AT names
    it, send the run the signal there. Inside the runner the signal is handled before this returns."""
    if os.environ.get(CUT_AT_ENV) != name:
        return
    sig = signal.Signals[os.environ.get(CUT_SIGNAL_ENV) or "SIGINT"]
    os.kill(int(os.environ.get(CUT_PID_ENV) or os.getpid()), sig)
