"""The real llama-server as an endpoint: started OUTSIDE the lab (a plain subprocess on its own free port, as a
user would start it), then measured by `lab run --profile <endpoint profile> --only 04,06`, with and without
--api-key. Nothing is faked: the engine, its answers and its refusals are llama.cpp's own.

About three minutes on 2 cores (notebook 06 measures the client's own capacity too); bench sizes are tiny.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import ROOT, lab_run, read_record

from lab.core import paths, profiles
from lab.serving import serve
from lab.measure import load_levels, loadgen, metrics
from lab.diagnose import endpoint_diagnose


KEY_ENV = "LAB_TEST_ENDPOINT_KEY"
KEY = "lab-test-" + os.urandom(12).hex()  # never written by the test itself: searched for in the run folder


@pytest.fixture(scope="module")
def llama_server_tool():
    try:
        return paths.tool("llama-server"), paths.embedded_model("smollm2")
    except paths.SetupMissing as exc:
        pytest.skip(f"llama.cpp is not set up: {exc}")


def start_outside_the_lab(tool, model, log: Path, *, slots: int, ctx: int, key: str | None = None):
    """llama-server as a user starts it: its own process group, its own port, no lab code involved."""
    port = serve.free_port()
    argv = [str(tool), "-m", str(model), "-c", str(ctx), "-np", str(slots), "-t", "1",
            "--host", "127.0.0.1", "--port", str(port)] + (["--api-key", key] if key else [])
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # /health is public even with --api-key (tools/server/server-http.cpp)
        try:
            if httpx.get(base + "/health", timeout=2, trust_env=False).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    stop(proc)
    pytest.fail(f"llama-server did not become healthy: {log.read_text()[-2000:]}")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def keyed_server(llama_server_tool, tmp_path_factory):
    log = tmp_path_factory.mktemp("keyed") / "llama-server.log"
    proc, base = start_outside_the_lab(*llama_server_tool, log, slots=2, ctx=2048, key=KEY)
    yield base
    stop(proc)


@pytest.fixture(scope="module")
def open_serial_server(llama_server_tool, tmp_path_factory):
    log = tmp_path_factory.mktemp("serial") / "llama-server.log"
    proc, base = start_outside_the_lab(*llama_server_tool, log, slots=1, ctx=512)
    yield base
    stop(proc)


def endpoint_profile(tmp_path: Path, base: str, *, key_env: str | None, ctx: int, slots: int) -> Path:
    data = yaml.safe_load((ROOT / "params" / "endpoint-example.yaml").read_text())
    data.update(name="ep-llama", endpoint_url=base + "/v1", context_tokens=ctx, parallel_slots=slots,
                bench_prompt_tokens=32, bench_output_tokens=16, bench_concurrency=[1, 2], bench_requests=4,
                bench_duration_s=10)
    if key_env:
        data["api_key_env"] = key_env
    path = tmp_path / "ep-llama.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.notebooks
def test_measured_as_an_endpoint_with_its_key(keyed_server, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    profile = endpoint_profile(tmp_path, keyed_server, key_env=KEY_ENV, ctx=2048, slots=2)
    run = lab_run(tmp_path / "out", str(profile), "04,06")

    serve_rec = read_record(run, "04_serve")
    s = serve_rec["summary"]
    assert s["external"] and s["completions_ok"] and s["chat_ok"] and s["stopped_clean"] is None
    assert (s["engine_found"], s["context_per_request_reported"]) == ("llama.cpp", 1024)  # -c 2048 -np 2
    facts = serve_rec["discovery"]["facts"]
    assert facts["slots"] == 2 and facts["context_trained"] == 8192 and facts["model_bytes"] == 96576768

    b = read_record(run, "06_benchmark")
    assert [x["successes"] for x in b["sweep"]] == [4, 4] and b["summary"]["tokens_counted_from"] == ["usage"]
    assert all(r["tokens_from"] == "usage" and r["output_tokens"] == 16 for x in b["runs"] for r in x["results"])
    assert [q["concurrency"] for q in b["queueing"]] == [1, 2]
    if (ROOT / ".venv-vllm" / "bin" / "vllm").exists():  # `make test` sets it up: vLLM's client against llama-server
        peer = b["peer_check"]
        assert peer["skipped"] is None and peer["vllm_bench"]["returncode"] == 0 and peer["rows"], peer.get("vllm_bench")

    manifest = json.loads((run / "manifest.json").read_text())
    server = manifest["server"]
    assert not server["started_by_lab"] and server["engine_found"] == "llama.cpp"
    assert server["engine_version_found"] == facts["build"] and server["api_key_env"] == KEY_ENV
    leaked = [p for p in run.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert not leaked, f"the key is in {leaked}"


@pytest.mark.notebooks
def test_without_its_key_04_fails_saying_why(keyed_server, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    profile = endpoint_profile(tmp_path, keyed_server, key_env=KEY_ENV, ctx=2048, slots=2)
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", str(profile), "--only", "04",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 1
    run = Path(next(l for l in proc.stdout.splitlines() if l.startswith("run folder:")).split(":", 1)[1].strip())
    book = json.loads((run / "manifest.json").read_text())["notebooks"][0]
    assert book["status"] == "failed" and "EndpointUnreachable" in book["error"] and "HTTP 401" in book["error"]
    assert f"{KEY_ENV}, which is not set" in book["error"]
    reach = endpoint_diagnose.run(profiles.load(profile))["probes"][0]
    assert reach["severity"] == "error" and reach["kb"][0] == "endpoint-unauthorized"
    assert "Invalid API Key" in reach["answer"]  # llama-server's own text


@pytest.mark.tools
def test_one_slot_queues_and_is_flagged(open_serial_server, tmp_path):
    """-np 1: the second stream waits for the first. The verdict compares two time windows (one stream, then two),
    so a burst of other work on a shared machine during one of them can hide the queueing once (it did, once in
    four clean CI runs); a person would measure again: up to three sweeps, and one must flag it. A server that
    batched would fail all three (its two streams overlap: no wait, throughput up)."""
    target = loadgen.Target(open_serial_server, model="any", max_tokens=48)  # decode, not per-request overhead, dominates: a serial server cannot overlap it
    attempts = []
    for _ in range(3):
        runs = load_levels.sweep(target, [1, 2], requests_per_level=6, prompt_words=24)
        queue = metrics.queueing([metrics.summarise_run(r) for r in runs])
        attempts.append({k: queue[1][k] for k in ("queued", "wait_vs_serial", "throughput_gain")})
        if queue[1]["queued"]:
            break
    assert attempts[-1]["queued"] is True, attempts
    assert attempts[-1]["wait_vs_serial"] > 0.5 and attempts[-1]["throughput_gain"] < 1.25, attempts


@pytest.mark.tools
def test_open_server_diagnosed_by_its_own_answers(open_serial_server, tmp_path):
    profile = profiles.load(endpoint_profile(tmp_path, open_serial_server, key_env=None, ctx=512, slots=1))
    probes = {p["probe"]: p for p in endpoint_diagnose.run(profile)["probes"]}
    assert probes["key"]["verdict"] == "the server needs no key" and probes["key"]["severity"] == "pass"
    assert probes["name"]["status"] == 200  # llama-server serves its one model whatever the name
    ctx = probes["context"]
    assert ctx["status"] == 400 and ctx["kb"][0] == "llamacpp-context-exceeded" and ctx["context"] == 512
    assert "exceeds the available context size" in ctx["answer"]
