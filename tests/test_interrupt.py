"""lab.core.interrupt.CutWatch: SIGINT / SIGTERM become KeyboardInterrupt / Terminated, and from the signal on the
libraries' echoes of the cut (papermill's logger, asyncio's) are dropped; before it they pass."""
import logging
import os
import signal

import pytest

from lab.core import interrupt


class Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, interrupt.Terminated)])
def test_a_cut_raises_and_silences_its_echoes(sig, raised):
    keep = Keep()
    loggers = [logging.getLogger(name) for name in interrupt.ECHO_LOGGERS]
    for log in loggers:
        log.addHandler(keep)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    watch = interrupt.CutWatch()
    try:
        loggers[0].error("before the cut")
        with pytest.raises(raised) as info:
            os.kill(os.getpid(), sig)
        assert interrupt.name_of(info.value) == signal.Signals(sig).name
        for log in loggers:
            log.error("Kernel died while waiting for execute reply.")
        assert keep.seen == ["before the cut"]
    finally:
        watch.restore()
        for log in loggers:
            log.removeHandler(keep)
            log.removeFilter(watch)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_without_a_cut_restore_leaves_the_loggers_as_they_were():
    watch = interrupt.CutWatch()
    watch.restore()
    assert all(watch not in logging.getLogger(name).filters for name in interrupt.ECHO_LOGGERS)
