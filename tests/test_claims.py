"""The claims ledger: data checks and exact verdicts (pure: no hardware needed)."""

import pytest

from lab import claims, profiles
from lab.paths import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"
V100_MEASURED = {"hardware": {"gpu_name": "Tesla V100-PCIE-32GB", "gpu_count": 1}, "engine": "llama.cpp",
                 "context_tokens": 640}


def by_id(items):
    return {v.id: v for v in items}


def test_ledger_is_complete_and_sourced():
    items = claims.claims()
    assert len(items) >= 50
    assert {c["seed"] for c in items} == {"000_f21456be5f1cce5e.txt", "001_50bdde88a1e6876f.txt"}
    for c in items:
        assert c["source"].startswith("shared/seeds/" + c["seed"]), c["id"]
        assert c["english"] and c["unit"] is not None


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"seed texts not at {SEEDS}")
def test_every_quote_is_verbatim_in_its_seed():
    for c in claims.claims():
        text = (SEEDS / c["seed"]).read_text()
        assert c["quote"] in text, c["id"]


def test_verdicts_are_from_the_fixed_vocabulary():
    items = claims.verdicts(profiles.load("cpu-default"))
    assert {v.verdict for v in items} <= set(claims.VERDICTS)
    assert sum(claims.counts(items).values()) == len(claims.claims())


def test_280_single_stream_on_two_v100_is_impossible():
    v = claims.judge(next(c for c in claims.claims() if c["id"] == "s0-vllm-single-stream-280"))
    assert v.verdict == "impossible by physics"
    # 2 x 900 GB/s (perfect tensor parallelism) ÷ 27e9 weights x 4 bits ÷ 8 (= 13.5 GB, no KV)
    assert v.numbers["ceiling_max_tok_s"] == pytest.approx(1800e9 / 13.5e9)
    assert "133 tok/s" in v.explanation


def test_llama_cpp_180_on_one_v100_is_impossible_and_45_55_is_not():
    items = by_id(claims.verdicts())
    assert items["s0-llamacpp-one-v100-180"].verdict == "impossible by physics"
    assert items["s0-llamacpp-one-v100-180"].numbers["ceiling_max_tok_s"] == pytest.approx(900e9 / 13.5e9)
    v = items["s1-llamacpp-45-55"]
    assert v.verdict == "not testable here"
    # 27e9 params x Q4_K_M bits from lab/data/weight_bits.yaml (lab.weights, the one table): 4.899
    assert v.numbers["ceiling_typical_tok_s"]["qwen3-32b"] == pytest.approx(900e9 / (27e9 * 4.899 / 8))
    assert items["s0-vllm-aggregate-4-400"].verdict == "not testable here"  # 400 < 4 x 1800 / 13.5 = 533


def test_measurement_on_the_claims_hardware_decides():
    slow = by_id(claims.verdicts(measured={**V100_MEASURED, "single_stream_tok_s": 30.0}))
    assert slow["s1-llamacpp-45-55"].verdict == "contradicted by measurement"  # 30 < 45 x 0.85
    assert slow["s1-llamacpp-40-60"].verdict == "contradicted by measurement"  # 30 < 40 x 0.85 = 34
    assert slow["s1-context-8k-50"].verdict == "not testable here"  # measured at 640 tokens, not 8K
    fast = by_id(claims.verdicts(measured={**V100_MEASURED, "single_stream_tok_s": 50.0}))
    assert fast["s1-llamacpp-45-55"].verdict == "consistent"
    elsewhere = {**V100_MEASURED, "hardware": {"gpu_name": None, "gpu_count": 0}, "single_stream_tok_s": 140.0}
    assert by_id(claims.verdicts(measured=elsewhere))["s1-llamacpp-45-55"].verdict == "not testable here"


def test_arithmetic_and_documentation_claims():
    items = by_id(claims.verdicts())
    kv = items["s0-kv-64k-12-14gb"]
    assert kv.verdict == "contradicted by facts"
    assert kv.numbers["stand_ins_bytes"]["qwen3-32b"] == 16 * 2**30  # 64 x 8 x 128 x 2 x 2 B x 65536
    assert kv.numbers["seed_shape_bytes"] == 10 * 2**30
    assert items["s1-fp16-weights-54gb"].verdict == "consistent"
    assert items["s1-fp16-weights-54gb"].numbers["bytes"] == [54e9, 54e9]
    assert items["s0-fp8-kv-halves"].verdict == "consistent"
    assert items["s0-driver-535-cuda-12.2"].verdict == "consistent"
    assert items["s1-driver-470-515"].verdict == "contradicted by facts"
    assert items["s1-avoid-535"].verdict == "contradicted by facts"
    assert items["s0-vllm-0.4.2-awq-v100"].verdict == "contradicted by facts"
    assert items["s1-ecc-cost-5-10pct"].verdict == "contradicted by facts"
    assert items["s0-27b-40-layers"].verdict == "contradicted by facts"  # delegated to lab.memory_plan
    assert items["s1-context-32k-fits"].verdict == "consistent"
    assert items["s0-price-card"].verdict == "not testable here"


def test_plan_part_shape():
    part = claims.plan_part(profiles.load("v100-32g-x1"))
    assert part["decode_ceiling_tok_s"] == pytest.approx(part["roofline"]["decode_ceiling_tok_s"])
    assert part["predicted_decode_tok_s"] < part["decode_ceiling_tok_s"]
    assert len(part["claims"]) == len(claims.claims())
    assert sum(part["claim_counts"].values()) == len(claims.claims())
    cpu = claims.plan_part(profiles.load("cpu-default"))
    assert cpu["decode_ceiling_tok_s"] is None and "bandwidth" in cpu["roofline"]["reason"]
