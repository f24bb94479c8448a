"""The tools tier of tests/notebooks/test_endpoint_vllm.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
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
