"""Roofline arithmetic and calibration (pure): exact values."""
import pytest

from conftest import v100_x2_vllm
from lab.core import profiles
from lab.model import models, weights
from lab.predict import memory_plan, profile_speed, roofline


def test_single_stream_ceiling_is_bandwidth_over_bytes():
    assert roofline.decode_ceiling_tok_s(900, 16.5e9) == pytest.approx(54.5454545, rel=1e-9)
    assert roofline.decode_ceiling_tok_s(4227, roofline.bytes_per_token(18.43e9)) == pytest.approx(229.3543, rel=1e-6)
    assert roofline.bytes_per_token(10e9, 2e9) == 12e9


def test_aggregate_ceiling_reads_weights_once_per_step():
    # 2 x V100 (perfect scaling), 4-bit payload of 27e9 weights, no KV, 4 streams: 4 x 1800 / 13.5
    assert roofline.aggregate_ceiling_tok_s(1800, 13.5e9, 0, 4) == pytest.approx(533.3333333, rel=1e-9)
    # B x bw / (W + B x KV) = 2 x 900 / (10 + 2 x 1) GB
    assert roofline.aggregate_ceiling_tok_s(900, 10e9, 1e9, 2) == pytest.approx(150.0, rel=1e-12)
    assert roofline.aggregate_ceiling_tok_s(900, 10e9, 1e9, 1) == roofline.decode_ceiling_tok_s(900, 11e9)
    rows = roofline.ceilings_by_concurrency(900, 10e9, 1e9, [1, 2])
    assert rows[1] == {"concurrency": 2, "aggregate_ceiling_tok_s": pytest.approx(150.0), "per_stream_ceiling_tok_s": pytest.approx(75.0)}


@pytest.mark.parametrize("args", [(0, 1e9), (900, 0), (-1, 1e9)])
def test_ceiling_refuses_nonsense(args):
    with pytest.raises(ValueError):
        roofline.decode_ceiling_tok_s(*args)


def test_unknown_inputs_give_none_not_zero():
    assert roofline.efficiency(None, 50) is None
    assert roofline.efficiency(10, None) is None
    assert roofline.predicted_tok_s(None, 0.5) is None
    assert roofline.predicted_tok_s(100, None) is None
    assert roofline.predicted_tok_s(100, 0.25) == 25


def test_calibration_efficiencies_from_sourced_numbers():
    cal = {c.id: c for c in roofline.calibrations()}
    h200 = cal["h200-llamacpp-tg128-qwen3-32b-shape"]
    # the committed H200 evidence: tg128 87.62 tok/s against 4227 GB/s ÷ 18.45 GB ≈ 229 tok/s of copy roofline
    assert h200.efficiency("copy") == pytest.approx(87.62 * (18436147118 + 16777216) / 4227e9, rel=1e-12)
    assert h200.efficiency("copy") == pytest.approx(0.3825, abs=0.001)
    cpu = cal["cpu-2core-llamacpp-tg64-smollm2-q4_1"]
    assert cpu.efficiency("copy") == pytest.approx(141 * (96576768 + 737280) / 41.5e9, rel=1e-12)
    assert cpu.efficiency("datasheet") is None  # a CPU has no datasheet figure here
    agg = cal["h200-llama-server-16-streams"]
    assert agg.ceiling_tok_s("copy") == pytest.approx(16 * 4227e9 / (18436147118 + 16 * 33554432))
    for c in cal.values():
        assert c.source and c.quality in ("first_hand", "secondary")


def test_pick_calibration_prefers_same_gpu_then_nearest_size():
    # the only sourced V100 entry (llama.cpp PR #12183) wins for a V100, whatever the model size
    v100 = roofline.pick_calibration("gpu", "llama.cpp", "in_process", "datasheet", "V100.*32GB", weights_bytes=16.5e9)
    assert v100.id == "v100-llamacpp-tg128-qwen2-3b-q4_0"
    other = roofline.pick_calibration("gpu", "llama.cpp", "in_process", "datasheet", "RTX 4090", weights_bytes=16.5e9)
    assert other.id == "h200-llamacpp-tg128-qwen3-32b-shape"  # no 4090 entry: the nearest size among the rest
    h200 = roofline.pick_calibration("gpu", "llama.cpp", "in_process", "copy", "NVIDIA H200")
    assert h200.id.startswith("h200-llamacpp-tg")
    assert roofline.pick_calibration("cpu", "llama.cpp", "in_process", "copy").id == "cpu-2core-llamacpp-tg64-smollm2-q4_1"
    assert roofline.pick_calibration("cpu", "llama.cpp", "in_process", "datasheet") is None


def test_bandwidth_from_record_or_datasheet():
    v100 = profiles.load("v100-32g-x1")
    assert roofline.bandwidth_for(v100) == roofline.Bandwidth(900, "datasheet", 900, 1, roofline.bandwidth_for(v100).source)
    measured = roofline.bandwidth_for(v100, {"bandwidth": {"kind": "gpu", "gb_s": 790.0, "method": "torch copy"}})
    assert (measured.gb_s, measured.kind) == (790.0, "copy")
    # a host-RAM measurement says nothing about a GPU profile's decode: fall back to the datasheet
    assert roofline.bandwidth_for(v100, {"bandwidth": {"kind": "host_ram", "gb_s": 41.5}}).kind == "datasheet"
    cpu = profiles.load("cpu-default")
    assert roofline.bandwidth_for(cpu) is None
    assert roofline.bandwidth_for(cpu, {"bandwidth": {"kind": "host_ram", "gb_s": 41.5}}).gb_s == 41.5


def test_profile_ceiling_numbers_and_missing_inputs():
    v100 = profiles.load("v100-32g-x1")
    bw = roofline.Bandwidth(900, "datasheet", 900, 1, "test")
    out = roofline.profile_ceiling(v100, bandwidth=bw, weights_bytes=20e9, kv_bytes_per_seq=0, context_tokens=640)
    assert out["decode_ceiling_tok_s"] == pytest.approx(45.0)
    eff = {c.id: c for c in roofline.calibrations()}["v100-llamacpp-tg128-qwen2-3b-q4_0"].efficiency("datasheet")
    assert out["calibration_id"] == "v100-llamacpp-tg128-qwen2-3b-q4_0"
    assert out["efficiency_predicted_tok_s"] == pytest.approx(45.0 * eff)
    # llama.cpp on a GPU: the per-token model is the one prediction (plan, notebook 06 and the claims show it)
    assert out["predicted_decode_tok_s"] == out["per_token_predicted_tok_s"]
    assert out["predicted_decode_tok_s"] < out["decode_ceiling_tok_s"]
    assert out["prediction_basis"].startswith("per-token model")
    assert [r["concurrency"] for r in out["by_concurrency"]] == [1, 2, 4]
    none = roofline.profile_ceiling(profiles.load("cpu-default"), bandwidth=None, weights_bytes=1e8,
                                    kv_bytes_per_seq=0, context_tokens=160)
    assert none["decode_ceiling_tok_s"] is None and none["predicted_decode_tok_s"] is None
    assert "bandwidth" in none["reason"] and "notebook 01" in none["reason"]


def test_profile_roofline_for_a_stand_in_profile():
    v100 = profiles.load("v100-32g-x1")  # config:qwen3.8-27b, Q4_K_M, no model file on this machine
    out = profile_speed.roofline_for(v100)
    weights = 16_536_406_016  # llama.cpp's Q4_K_M mix over qwen3.8-27b's tensors (lab.model.quant_formats, exact), not params x bpw
    # 640 tokens x 64 KiB (16 full-attention layers x 4 KV heads x 256 x 2 x f16) + the 48 Gated DeltaNet layers' state
    kv = (512 + 256 // 2) * 65536 + models.stand_in("qwen3.8-27b").linear_state_bytes_per_seq
    assert out["context_tokens"] == 640
    assert out["weights_bytes"] == pytest.approx(weights)
    assert out["kv_bytes_per_seq"] == kv
    # the ceiling reads the weights less token_embd (248,320 x 5,120 Q4_K = 682.03 MiB, kept in host memory):
    # lab/data/calibration.yaml read_per_token, the one definition the claims' ceilings use too
    read = weights - 715_161_600
    assert out["weights_read_bytes"] == read
    assert out["bytes_per_token"] == read + kv
    assert out["decode_ceiling_tok_s"] == pytest.approx(900e9 / (read + kv))
    assert round(out["decode_ceiling_tok_s"]) == 56
    assert out["weights_bytes"] == memory_plan.plan_memory(v100)["weights_bytes"]  # one answer (lab.model.weights)


def test_roofline_and_memory_plan_share_weight_bytes_under_tensor_parallelism():
    x2 = v100_x2_vllm()  # vLLM GPTQ-INT4, tensor_parallel_size 2
    out, plan = profile_speed.roofline_for(x2), memory_plan.plan_memory(x2)
    assert out["weights_bytes"] == plan["weights_bytes"] == weights.weights_bytes("GPTQ-INT4", arch=models.stand_in("qwen3-32b"))[0]
    assert "each GPU reads 1/2" in out["weights_read_how"] and "(perfect tensor parallelism)" in out["weights_read_how"]


def test_tensor_parallel_vllm_profile_uses_both_gpus():
    x2 = v100_x2_vllm()  # vLLM, tensor_parallel_size 2 (n_gpu_layers is llama.cpp's)
    assert roofline.runs_on_gpu(x2)
    bw = roofline.bandwidth_for(x2)
    assert (bw.gb_s, bw.kind, bw.devices) == (1800, "datasheet", 2)


def test_per_token_model_fit_recovers_a_known_model():
    from lab.predict import roofline

    # two shapes on one device with one fixed cost: t = b / (0.5 x 4000 GB/s) + 5 ms
    pts = [{"id": "a", "family": "dense", "arch": "x", "weights_bytes": 10e9, "tok_s": 1 / (10e9 / 2000e9 + 0.005),
            "datasheet_gb_s": 4000, "copy_gb_s": 3000},
           {"id": "b", "family": "dense", "arch": "x", "weights_bytes": 20e9, "tok_s": 1 / (20e9 / 2000e9 + 0.005),
            "datasheet_gb_s": 4000}]
    m = roofline.fit_per_token(pts)
    assert m.fixed_ms_by_family == {"dense": pytest.approx(5.0)} and m.fraction_by_arch == {"x": pytest.approx(0.5)}
    assert m.predict_tok_s(10e9, 4000, "datasheet", "dense", "x") == pytest.approx(pts[0]["tok_s"])
    assert m.predict_tok_s(10e9, 3000, "copy", "dense", "x") == pytest.approx(pts[0]["tok_s"])  # copy = 0.75 datasheet
    # an architecture without rows gets the median fraction; a fraction above 1 is refused as unphysical
    assert m.fraction_for("unknown") == pytest.approx(0.5)
    fast = [dict(p, datasheet_gb_s=1000) for p in pts]
    with pytest.raises(ValueError, match="datasheet"):
        roofline.fit_per_token(fast)
    # the lab's model: H200 points + the public rows (tests/unit/test_public_speed.py checks the fitted values)
    h = roofline.per_token_model()
    assert set(h.fixed_ms_by_family) == {"qwen35", "dense"} and "fitted on 30 measured points" in h.how


def test_projection_rows_v100_below_roofline():
    from lab.predict import roofline

    rows = {r["gpu"]: r for r in roofline.projection_rows(16.5e9, "qwen35")}
    v100 = next(r for g, r in rows.items() if "V100" in g)
    assert v100["projected_tok_s"] < v100["roofline_tok_s"] and 30 < v100["projected_tok_s"] < 40
    assert roofline.family_of("qwen3_5_text") == "qwen35" and roofline.family_of(None) == "dense"


def test_a_controlled_pair_gives_its_architecture_its_own_fixed_cost():
    """Points of one `controlled` group (one file, one build) on two bandwidths tell an architecture's fixed cost from
    its fraction: that architecture is fitted on its own (e), the others share c. Without the marker the same points
    share the one fixed cost (a public row of another build is no controlled pair)."""
    from lab.predict import roofline

    def pt(i, arch, b, bw, c_ms, f, **kw):
        return {"id": i, "family": "qwen35", "arch": arch, "weights_bytes": b, "datasheet_gb_s": bw,
                "tok_s": 1 / (b / (f * bw * 1e9) + c_ms / 1000), **kw}

    shared = [pt("a", "x", 10e9, 1000, 3.0, 0.8), pt("b", "x", 20e9, 1000, 3.0, 0.8), pt("c", "y", 15e9, 500, 3.0, 0.6)]
    pair = [pt("h1", "z", 14e9, 3350, 7.5, 1.0, controlled="lab"), pt("h2", "z", 14e9, 4800, 7.5, 1.0, controlled="lab")]
    m = roofline.fit_per_token(shared + pair)
    assert m.fixed_ms_by_family == {"qwen35": pytest.approx(3.0)} and m.extra_fixed_ms_by_arch == {"z": pytest.approx(4.5, abs=0.02)}
    # the grid's step (0.01 ms) and the cap (no fraction above 1) meet at 7.49
    assert m.fixed_for("qwen35", "z") == pytest.approx(7.5, abs=0.02) and m.fixed_for("qwen35", "x") == pytest.approx(3.0)
    assert m.fraction_by_arch["z"] == pytest.approx(1.0, abs=0.01) and m.default_fraction == pytest.approx(0.8)
    assert m.predict_tok_s(14e9, 4800, "datasheet", "qwen35", "z") == pytest.approx(pair[1]["tok_s"], rel=2e-3)
    assert m.fixed_by_arch("qwen35") == {"default": pytest.approx(3.0), "z": pytest.approx(7.5, abs=0.02)}
    assert roofline.controlled_pairs(shared + pair, "qwen35") == {"z": pair}
    unmarked = [{k: v for k, v in p.items() if k != "controlled"} for p in pair]
    assert roofline.fit_per_token(shared + unmarked).extra_fixed_ms_by_arch == {}
    # the lab's own: the H100 + H200 pair (calibration.yaml per_token_points, `controlled`)
    lab = roofline.per_token_model()
    assert set(lab.extra_fixed_ms_by_arch) == {"hopper"} and "its own, from a controlled pair" in lab.how
