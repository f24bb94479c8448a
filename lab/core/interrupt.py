"""SIGTERM unwinds like Ctrl-C: `lab run` and every verb turn both into one line and exit 130 / 143.

Standard library only and imported first by `python -m lab`, so the handler is in place before the heavy
imports (pandas, pydantic, papermill) that take seconds on a busy machine."""
from __future__ import annotations

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
