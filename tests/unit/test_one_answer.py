"""One answer per question across the lab's views (issue 22): the decode ceiling and the speed prediction that
`lab plan` prints for a profile are the ones the claims ledger holds the seeds' claims against, and notebook 01's box
at the datasheet bandwidth; both V100 profiles and `lab byhand` give one driver and CUDA answer."""
from __future__ import annotations

import pytest

from lab.core import profiles
from lab.pages import hardware
from lab.predict import claims, claims_ledger, plan, roofline
from lab.serving import byhand, byhand_choices

pytestmark = pytest.mark.unit

Q4_PROFILES = ("v100-32g-x1", "v100-32g-x2-nvlink", "rtx4090-24g", "h200-x1")


def _claim(gpu_id: str, quant: str) -> dict:
    return {"id": "probe", "seed": "-", "kind": "speed_single_stream", "quote": "-", "english": "-", "value": 1,
            "unit": "tok/s", "source": "-", "test": {"kind": "decode_ceiling"},
            "condition": {"gpu": gpu_id, "gpus": 1, "engine": "llama.cpp", "model": "27b", "quant": quant}}


@pytest.mark.parametrize("name", Q4_PROFILES)
def test_plan_and_claims_give_one_ceiling_and_one_prediction(name):
    prof = profiles.load(name)
    result = plan.plan(name)
    rl = result["roofline"]
    gpu = roofline.gpu_spec_for(prof.gpu_name_pattern)
    v = claims.judge(_claim(gpu["id"], prof.model_quant))
    # the same bytes read per token (calibration.yaml read_per_token) at the same depth ...
    assert v.numbers["depth_tokens"] == rl["context_tokens"] == roofline.read_definition()["default_depth_tokens"]
    assert v.numbers["weights_read_bytes"] + v.numbers["kv_bytes_per_seq"] == rl["bytes_per_token"]
    # ... so one ceiling and one prediction per card
    assert v.numbers["ceiling_tok_s"] == pytest.approx(result["decode_ceiling_tok_s"], rel=1e-12)
    assert v.numbers["predicted_tok_s"] == pytest.approx(result["predicted_decode_tok_s"], rel=1e-12)
    proj = next(p for p in result["projections"] if p["gpu"] == gpu["name"])
    assert proj["roofline_tok_s"] == round(result["decode_ceiling_tok_s"], 1)
    assert proj["projected_tok_s"] == round(result["predicted_decode_tok_s"], 1)
    # notebook 01's box at the datasheet bandwidth says the same ceiling
    # (a measured "copy" bandwidth is used as measured; here the record carries the datasheet figure as one)
    ceiling, read = hardware._ceiling(prof, {"kind": "gpu", "gb_s": prof.gpu_memory_bandwidth_gb_s})
    assert read == rl["bytes_per_token"]
    assert ceiling == pytest.approx(result["decode_ceiling_tok_s"], rel=1e-12)


def test_the_v100_owner_reads_one_speed():
    """plan v100-32g-x1, the ledger's V100 claims (40-60, 45-55) and the route table: 56 tok/s ceiling, 34 predicted."""
    result = plan.plan("v100-32g-x1")
    items = {v.id: v for v in claims.verdicts()}
    for cid in ("s1-llamacpp-40-60", "s1-llamacpp-45-55", "s0-llamacpp-one-v100-180"):
        assert items[cid].numbers["ceiling_tok_s"] == pytest.approx(result["decode_ceiling_tok_s"], rel=1e-12), cid
    assert round(result["decode_ceiling_tok_s"]) == 56 and round(result["predicted_decode_tok_s"]) == 35
    assert f"gives {result['predicted_decode_tok_s']:.0f} tok/s" in items["s1-llamacpp-45-55"].explanation
    one = next(r for r in result["routes"]["routes"] if r["id"] == "llama-one")
    assert one["tok_s"] == pytest.approx(result["predicted_decode_tok_s"], rel=1e-12)
    text = plan.describe(result)
    assert text.count("read per token:") == 1 and "13.4 GB of 4-bit weights" not in text
    assert "expect 1" not in text


def test_both_v100_profiles_and_byhand_give_one_driver_and_cuda_answer():
    x1, x2 = profiles.load("v100-32g-x1"), profiles.load("v100-32g-x2-nvlink")
    assert (x1.driver_version, x1.cuda_toolkit) == (x2.driver_version, x2.cuda_toolkit)
    for prof in (x1, x2):
        for ubuntu in byhand_choices.UBUNTU_RELEASES:
            toolkit = byhand_choices.toolkit_for(prof, ubuntu)
            assert toolkit == prof.cuda_toolkit
            branch = byhand_choices.driver_branch_for(prof, toolkit)
            assert str(branch) == prof.driver_version.split(".")[0]
            text = byhand.script(prof, ubuntu)
            assert f"nvidia-driver-{branch}-server" in text and f"cuda-toolkit-{toolkit.replace('.', '-')}" in text
    assert claims_ledger.claims()  # the ledger loads with its sources
