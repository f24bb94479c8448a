"""SIGTERM unwinds like Ctrl-C: `lab run` and every verb turn both into one line and exit 130 / 143.

Standard library only and imported first by `python -m lab`, so the handler is in place before the heavy
imports (pandas, pydantic, papermill) that take seconds on a busy machine."""
from __future__ import annotations

import logging
import signal

SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so papermill and the runner unwind the same way for both."""


def raise_terminated(_signum, _frame):
    raise Terminated()


def install() -> object:
    """Make SIGTERM raise Terminated; return the previous handler."""
    return signal.signal(signal.SIGTERM, raise_terminated)


def name_of(exc: BaseException) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


# Loggers whose reports of a cut are the cut's own echo: nbclient (through papermill's logger) says "Kernel died
# while waiting for execute reply" when the signal lands in its reply wait, and asyncio prints "Task exception was
# never retrieved" with a traceback when that task is collected. The run says what happened in one line.
ECHO_LOGGERS = ("papermill", "asyncio")


class CutWatch(logging.Filter):
    """While `lab run` executes notebooks: SIGINT raises KeyboardInterrupt and SIGTERM Terminated, as everywhere,
    and from the signal on the ECHO_LOGGERS are silent. `restore()` puts the previous handlers back; after a cut
    the filter stays (the process is ending, and asyncio reports collected tasks late)."""

    def __init__(self):
        super().__init__()
        self.cut = False
        self._old = (signal.signal(signal.SIGINT, self._on_signal), signal.signal(signal.SIGTERM, self._on_signal))
        for name in ECHO_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def _on_signal(self, signum, _frame):
        self.cut = True
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.cut

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._old[0])
        signal.signal(signal.SIGTERM, self._old[1])
        if not self.cut:
            for name in ECHO_LOGGERS:
                logging.getLogger(name).removeFilter(self)
