"""What the tiers of tests/notebooks/test_endpoint_vllm.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
from __future__ import annotations

import pytest
import yaml
from conftest import ROOT


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
