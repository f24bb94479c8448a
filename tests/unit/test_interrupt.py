"""lab.core.interrupt: SIGINT / SIGTERM / SIGHUP (real signals to this process) become KeyboardInterrupt /
Terminated / Hangup, from the signal on further signals are ignored (the clean-up is not cut) and the libraries'
echoes of the cut (papermill's logger, asyncio's) are dropped; before it they pass. SIGHUP ignored (nohup) stays
ignored. The named cut points signal the run; a cut run's manifest asks no server and hashes no model file."""
import logging
import os
import signal
from types import SimpleNamespace

import pytest

from lab.core import interrupt

CUT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def handlers_back():
    """Every test leaves this process's handlers as it found them (SIGHUP may start out ignored: nohup)."""
    before = {sig: signal.getsignal(sig) for sig in CUT_SIGNALS}
    yield before
    for sig, handler in before.items():
        signal.signal(sig, handler)


class Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, interrupt.Terminated),
                                         (signal.SIGHUP, interrupt.Hangup)])
def test_a_cut_raises_and_silences_its_echoes(sig, raised):
    keep = Keep()
    loggers = [logging.getLogger(name) for name in interrupt.ECHO_LOGGERS]
    for log in loggers:
        log.addHandler(keep)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a terminal's default, also when the tests run under nohup
    before = tuple(signal.getsignal(s) for s in CUT_SIGNALS)
    watch = interrupt.CutWatch()
    try:
        loggers[0].error("before the cut")
        with pytest.raises(raised) as info:
            os.kill(os.getpid(), sig)
        assert interrupt.name_of(info.value) == signal.Signals(sig).name
        assert interrupt.SIGNAL_EXIT[interrupt.name_of(info.value)] == 128 + sig
        # from the first signal on, the others are ignored: a second Ctrl-C cannot cut the clean-up
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in CUT_SIGNALS)
        os.kill(os.getpid(), signal.SIGINT)  # ignored: nothing raised
        for log in loggers:
            log.error("Kernel died while waiting for execute reply.")
        assert keep.seen == ["before the cut"]
    finally:
        watch.restore()
        for log in loggers:
            log.removeHandler(keep)
            log.removeFilter(watch)
    assert tuple(signal.getsignal(s) for s in CUT_SIGNALS) == before


def test_without_a_cut_restore_leaves_the_loggers_as_they_were():
    watch = interrupt.CutWatch()
    watch.restore()
    assert all(watch not in logging.getLogger(name).filters for name in interrupt.ECHO_LOGGERS)


def test_the_command_lines_handlers_turn_sighup_into_hangup():
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    old = interrupt.install()
    try:
        with pytest.raises(interrupt.Hangup) as info:
            os.kill(os.getpid(), signal.SIGHUP)
        assert isinstance(info.value, interrupt.Terminated) and interrupt.name_of(info.value) == "SIGHUP"
        with pytest.raises(interrupt.Terminated) as info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert interrupt.name_of(info.value) == "SIGTERM"
    finally:
        interrupt.restore_handlers(old)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


def test_sighup_ignored_by_nohup_stays_ignored():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    old = interrupt.install()
    watch = interrupt.CutWatch()
    try:
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed: the run goes on
    finally:
        watch.restore()
        interrupt.restore_handlers(old)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


@pytest.mark.parametrize("sig", CUT_SIGNALS)
def test_a_named_cut_point_signals_the_run_only_when_named(sig, monkeypatch):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    monkeypatch.setenv(interrupt.CUT_AT_ENV, "manifest")
    monkeypatch.setenv(interrupt.CUT_SIGNAL_ENV, signal.Signals(sig).name)
    monkeypatch.delenv(interrupt.CUT_PID_ENV, raising=False)  # the runner's own points: this process
    watch = interrupt.CutWatch()
    try:
        interrupt.cut_point("report")  # another point: nothing happens
        assert not watch.cut
        with pytest.raises(KeyboardInterrupt) as info:
            interrupt.cut_point("manifest")
        assert interrupt.name_of(info.value) == signal.Signals(sig).name and watch.cut
    finally:
        watch.restore()


def test_a_cut_runs_manifest_asks_no_server_and_hashes_no_model(monkeypatch, tmp_path):
    """The clean-up after a cut ignores signals, so it must not wait on a hung endpoint or a 17 GB hash."""
    from lab.records import manifest
    from lab.serving import endpoint

    def never(*a, **k):
        raise AssertionError("asked the endpoint during a cut run's clean-up")

    monkeypatch.setattr(endpoint, "discover", never)
    prof = SimpleNamespace(endpoint_url="http://127.0.0.1:9/v1", endpoint_base="http://127.0.0.1:9", served_model="m",
                           api_key_env=None, engine="ollama", engine_version=None, gpu_count=0)
    server = endpoint.served_by(prof, {}, ask=False)
    assert server["started_by_lab"] is False and server["engine_found"] is None
    with pytest.raises(AssertionError, match="asked the endpoint"):
        endpoint.served_by(prof, {})  # a finished run asks (its clean path can still be cut)

    monkeypatch.setattr(manifest, "_hash_cache_file", lambda: tmp_path / "sha256-cache.json")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    assert manifest.model_file_sha256(model, compute=False) is None  # not cached: not hashed now
    digest = manifest.model_file_sha256(model)
    assert len(digest) == 64 and manifest.model_file_sha256(model, compute=False) == digest  # cached: known
