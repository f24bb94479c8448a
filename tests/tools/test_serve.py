"""lab.serving.serve against the real llama-server and real processes (needs `make setup`)."""
import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import cmdline
from lab.core import ports, profiles
from lab.serving import engines, serve
from lab.serving import server as server_process
from lab.serving.server import group_members
from lab.pages import serve as serve_page
from lab.serving.engines import Command

pytestmark = pytest.mark.tools




def smol_command(model, **changes):
    return engines.build_command(profiles.load("cpu-default"), port=serve.free_port(), model_path=model, **changes)


def gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def fake_command(code: str, port: int) -> Command:
    """A real process that is not an LLM server (to test early exits and health time-outs)."""
    return Command("llama.cpp", (sys.executable, "-c", code), "127.0.0.1", port, "/health", "x", ())


def test_server_starts_serves_stops_and_leaves_no_process(smol_model, tmp_path, monkeypatch):
    cmd = smol_command(smol_model)
    with serve.start(cmd, log_dir=tmp_path / "logs", name="04_serve", health_timeout_s=120) as srv:
        pid = srv.pid
        assert srv.alive() and srv.health_s > 0 and srv.base_url == cmd.base_url
        smoke = serve.smoke_test(srv, max_tokens=4)
        assert smoke["completions"]["ok"] and smoke["completions"]["usage"]["completion_tokens"] >= 1
        assert smoke["chat"]["ok"] and smoke["chat"]["text"]
        reported = srv.reported()
        assert reported["slots"]["n_slots"] == 4 and reported["kv_caches"][0]["size_mib"] == "90.00"
        monkeypatch.setenv("LAB_TEST_EXT_KEY", srv.api_key)  # the lab's servers always have a key (per run)
        ext = serve.connect(engines.build_command(profiles.Profile(**{**profiles.load("cpu-default").model_dump(),
                                                                       "engine": "external", "port": cmd.port,
                                                                       "api_key_env": "LAB_TEST_EXT_KEY"})))
        assert ext.external and ext.stop()["external"]  # external: nothing started, nothing stopped
    report = srv.stop_report
    assert report["signal"] == "SIGTERM" and report["returncode"] == 0 and report["left_running"] == []
    assert gone(pid) and not group_members(pid)
    log = (tmp_path / "logs" / "04_serve.log").read_text()
    assert "n_slots = 4" in log and not list((tmp_path / "logs").glob(".*partial"))
    assert srv.stop() is report  # idempotent
    checks = serve_page.serve_checks(None, srv, smoke, report)
    assert [c.status for c in checks] == ["pass"] * 6  # started, health, two routes, shapes, stopped


def test_leaving_the_block_on_an_exception_stops_the_server(smol_model, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with serve.start(smol_command(smol_model), log_dir=tmp_path, name="s") as srv:
            pid = srv.pid
            raise KeyboardInterrupt  # what an interrupted notebook cell raises
    assert srv.stop_report["signal"] == "SIGTERM" and gone(pid)


def test_port_in_use_is_detected_before_starting(smol_model, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cmd = engines.build_command(profiles.load("cpu-default"), port=port, model_path=smol_model)
        before = {p.pid for p in psutil.process_iter()}
        with pytest.raises(serve.PortInUse) as err:
            serve.start(cmd, log_dir=tmp_path)
    msg = str(err.value)
    assert f"port {port}" in msg and "Fix" in msg and "free_port" in msg
    assert "python" in msg.lower() or "pytest" in msg.lower()  # names what holds it
    # only a server on this port counts: other tests' runs (conftest.BackgroundRun) start their own servers meanwhile
    spawned = {p.pid for p in psutil.process_iter()} - before
    assert not [p for p in spawned if cmdline(p)[:1] and "llama-server" in cmdline(p)[0] and str(port) in cmdline(p)]


def test_health_timeout_gives_a_clear_error_with_the_log_tail(tmp_path):
    port = serve.free_port()
    cmd = fake_command("print('fake server: loading weights', flush=True); import time; time.sleep(60)", port)
    t0 = time.monotonic()
    with pytest.raises(serve.StartupFailed) as err:
        serve.start(cmd, log_dir=tmp_path, name="slow", health_timeout_s=1.5)
    assert time.monotonic() - t0 < 15
    assert "did not answer 200 within 2 s" in str(err.value) and "fake server: loading weights" in err.value.log_tail
    assert (tmp_path / "slow.log").exists() and not server_process._LIVE


def test_early_exit_gives_the_exit_code_and_log_tail(smol_model, tmp_path):
    cmd = smol_command(smol_model, extra_args=("--no-such-flag",))
    with pytest.raises(serve.StartupFailed) as err:
        serve.start(cmd, log_dir=tmp_path, name="bad", health_timeout_s=60)
    assert "exited with code" in str(err.value)
    assert "--no-such-flag" in err.value.log_tail  # llama-server's own complaint


def test_measure_returns_the_measurement_or_the_refusal_and_stops_the_server(smol_model, tmp_path):
    """serve.measure, the one start → measure → stop of lab.tune and lab.speculative: a setting that serves gives
    the fields `how` measured; one llama-server refuses gives its own words; neither leaves a process."""
    pids = []

    def how(srv):
        pids.append(srv.pid)
        return {"answer": serve.smoke_test(srv, max_tokens=2)["completions"]["ok"]}

    ok = serve.measure(smol_command(smol_model), tmp_path, "ok", how)
    assert ok["status"] == "ok" and ok["error"] is None and ok["answer"] is True and ok["load_s"] > 0
    assert ok["seconds"] >= ok["load_s"] and "llama-server" in ok["command"] and gone(pids[0])
    refused = serve.measure(smol_command(smol_model, extra_args=("--spec-type", "draft-mtp")), tmp_path, "mtp", how)
    assert refused["status"] == "failed" and refused["load_s"] is None and len(pids) == 1
    assert refused["error"].startswith("llama_init_from_model: context type MTP requested but model doesn't contain MTP")
    assert "exiting due to model loading error" in refused["log_tail"]
    broke = serve.measure(smol_command(smol_model), tmp_path, "broke", lambda srv: pids.append(srv.pid) or 1 / 0)
    assert broke["status"] == "failed" and broke["error"] == "ZeroDivisionError: division by zero" and gone(pids[1])


def test_a_missing_model_file_is_refused_before_the_server_starts(smol_model, tmp_path):
    with pytest.raises(serve.BadModelFile, match="nonexistent/model.gguf"):
        serve.start(smol_command("/nonexistent/model.gguf"), log_dir=tmp_path, name="bad")
    assert not list(tmp_path.glob("*"))  # nothing started, no log


def test_binding_all_interfaces_without_a_key_is_refused(smol_model, tmp_path, monkeypatch):
    monkeypatch.delenv("LAB_TEST_UNSET_KEY", raising=False)
    prof = profiles.Profile(**{**profiles.load("cpu-default").model_dump(), "host": "0.0.0.0",
                               "api_key_env": "LAB_TEST_UNSET_KEY"})
    with pytest.raises(serve.UnsafeBind, match="LAB_TEST_UNSET_KEY is not set"):
        serve.start(engines.build_command(prof, port=serve.free_port(), model_path=smol_model), log_dir=tmp_path)
    no_key = smol_command(smol_model, host="0.0.0.0")
    with pytest.raises(serve.UnsafeBind, match="no api_key_env"):
        serve.start(no_key, log_dir=tmp_path)


CHILD = textwrap.dedent("""
    import json, sys, time
    from lab.core import profiles
    from lab.serving import engines, serve
    cmd = engines.build_command(profiles.load("cpu-default"), port=serve.free_port(), model_path=sys.argv[1])
    srv = serve.start(cmd, log_dir=sys.argv[2], name="child")
    print(json.dumps({"pid": srv.pid}), flush=True)
    if sys.argv[3] == "hang":
        time.sleep(120)
    # "exit": leave without stop(): atexit must stop it
""")


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_no_orphan_survives_the_python_process(smol_model, tmp_path, how):
    """A kernel that exits (atexit) or is SIGKILLed (PR_SET_PDEATHSIG) takes its server with it."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(smol_model), str(tmp_path),
                              "exit" if how == "exit" else "hang"], stdout=subprocess.PIPE, text=True)
    pid = json.loads(child.stdout.readline())["pid"]
    if how == "kill":
        child.kill()
    child.wait(timeout=60)
    assert gone(pid, within_s=15), f"llama-server pid {pid} outlived its Python process ({how})"


def test_free_port_is_bindable():
    port = serve.free_port()
    serve.check_port_free("127.0.0.1", port)


def test_free_port_is_outside_the_range_kernels_draw_from(monkeypatch):
    """CI (2026-12-05): a test picked a port with bind(0), wrote it into a profile, and seven `lab run`s later a
    Jupyter kernel's ZMQ socket (also bind(0)) held it: notebook 04 failed with PortInUse. The lab's pick is now
    below the ephemeral range, where no bind(0) lands; a range that starts low falls back to the OS's pick."""
    low = ports._ephemeral_low()
    picks = [serve.free_port() for _ in range(200)]
    if low > 12_000:
        assert all(low - 10_000 <= p < low for p in picks), sorted(picks)[:5]
    with socket.socket() as held:  # a busy port in the range is never handed out
        held.bind(("127.0.0.1", picks[0]))
        held.listen()
        assert picks[0] not in {serve.free_port() for _ in range(200)}
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", Path("/nonexistent/ip_local_port_range"))
    assert ports._ephemeral_low() == 32768
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 1024)
    serve.check_port_free("127.0.0.1", serve.free_port())


def test_notebook_04_steps_without_a_server_say_so():
    """Notebook 04's cells are one call each whether or not a server started: without one, each step says so."""
    from lab.serving import seed_commands

    from lab.core.session import Session

    prof = profiles.load("cpu-default")
    s = Session(prof, profiles.resolve("cpu-default"), Path("unused"))
    assert serve_page.smoke_test(s, None) is None and serve_page.discover(s, None) is None
    assert serve_page.reported(s, None) == {} and serve_page.stop(s, None) is None
    # each step keeps what it gave for the record (`record(s)`): here, that there was nothing
    assert s.results == {"smoke_test": None, "discovery": None, "reported": {}, "stop": None}
    assert serve_page.start_text(None, "no GPU here") == "skipped: no GPU here"
    assert serve_page.discovery_text(None) == "no server to ask"
    assert serve_page.target_line(prof) == "the lab starts the server itself"
    assert serve_page.then_and_now_text(prof, []).startswith("engine llama.cpp: the seeds' vLLM commands")
    corrections = seed_commands.seed_corrections_for(prof)
    rows = serve_page.corrections_rows(corrections)
    assert corrections and len(rows) == sum(len(c.rows()) for c in corrections)
    assert {r["command"] for r in rows} == {c.command_id for c in corrections}
    text = serve_page.corrections_text(corrections)
    assert all(f"corrected: {c.to_record()['corrected']}" in text for c in corrections)
