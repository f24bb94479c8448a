"""The real llama-server as an endpoint: started OUTSIDE the lab (a plain subprocess on its own free port, as a
user would start it), then measured by `lab run --profile <endpoint profile> --only 04,06`, with and without
--api-key. Nothing is faked: the engine, its answers and its refusals are llama.cpp's own.

About three minutes on 2 cores (notebook 06 measures the client's own capacity too); bench sizes are tiny.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, lab_run, read_record

from lab.core import profiles
from lab.diagnose import endpoint_diagnose
from shared_endpoint_llama import endpoint_profile, llama_server_tool, start_outside_the_lab, stop


KEY_ENV = "LAB_TEST_ENDPOINT_KEY"
KEY = "lab-test-" + os.urandom(12).hex()  # never written by the test itself: searched for in the run folder


@pytest.fixture(scope="module")
def keyed_server(llama_server_tool, tmp_path_factory):
    log = tmp_path_factory.mktemp("keyed") / "llama-server.log"
    proc, base = start_outside_the_lab(*llama_server_tool, log, slots=2, ctx=2048, key=KEY)
    yield base
    stop(proc)


@pytest.mark.notebooks
def test_measured_as_an_endpoint_with_its_key(keyed_server, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    profile = endpoint_profile(tmp_path, keyed_server, key_env=KEY_ENV, ctx=2048, slots=2)
    run = lab_run(tmp_path / "out", str(profile), "04,06")

    serve_rec = read_record(run, "04_serve")
    s = serve_rec["summary"]
    assert s["external"] and s["completions_ok"] and s["chat_ok"] and s["stopped_clean"] is None
    assert (s["engine_found"], s["context_per_request"]) == ("llama.cpp", 1024)  # -c 2048 -np 2
    facts = serve_rec["discovery"]["facts"]
    assert facts["parallel_slots"] == 2 and facts["context_trained"] == 8192 and facts["model_bytes"] == 96576768

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
