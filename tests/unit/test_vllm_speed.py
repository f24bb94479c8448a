"""lab.predict.vllm_speed: the vLLM model fitted on the fork's published V100 rows, and `lab predict --engine vllm`
giving the same answer as `lab plan`'s fork route."""
import math

import pytest

from lab.core import profiles
from lab.predict import card_speed, routes, vllm_speed


def test_fit_on_the_forks_shallow_rows():
    m = vllm_speed.model()
    # one shallow plain row (TP4 AWQ, 86.31 tok/s) fixes the fixed ms; Volta's fraction is the per-token model's
    # (one load per card cannot tell the two apart), the draft ms from the TP2 natural MTP row (3.91 tok/step)
    assert m.plain_rows == ("v100-32g-x4-1cat-awq-tp4-plain",) and m.fraction_by_arch == {}
    # 4.13 / 2.75 since Hopper got its own fixed cost (the shared one, fitted without the H100 + H200 pair, moved the
    # per-token model's Volta fraction 0.703 -> 0.695, the fraction this fit takes; was 4.21 / 2.79)
    assert round(m.fixed_ms, 2) == 4.13 and round(m.draft_ms, 2) == 2.75
    assert m.fraction_for("volta")[1].startswith("FALLBACK")


def test_the_forks_tp2_rows_within_10_percent():
    result = vllm_speed.check()
    by = {x["id"]: x for x in result["rows"]}
    plain = by["v100-32g-x2-1cat-awq-tp2-plain"]  # 16K deep: not fitted, predicted
    # 53.9 since Hopper's own fixed cost (Volta fraction 0.695; was 54.1)
    assert plain["group"] == "depth" and round(plain["held_out"], 1) == 53.9 and abs(plain["held_out_error"]) < 0.10
    mtp = by["v100-32g-x2-1cat-fp8-tp2-natural-mtp"]  # the one shallow MTP row: in the fit, none to hold it out
    assert round(mtp["in_sample"], 1) == 102.7 and math.isnan(mtp["held_out"])
    assert "held out: none (the only row of its kind in the fit)" in vllm_speed.check_text(result)


def test_predict_and_plan_agree_on_two_v100s():
    r = card_speed.predict(card_speed.Ask(gpu="V100 32GB", gpus=2, engine="vllm"))
    fork = next(x for x in routes.route_table(profiles.load("v100-32g-x2-nvlink"))["routes"] if x["id"] == "fork-tp2")
    # 56.4 since Hopper's own fixed cost (Volta fraction 0.695; was 56.6)
    assert round(r["predicted_tok_s"], 1) == round(fork["tok_s"], 1) == 56.4
    assert r["model"]["link"] == "v100-sxm2-nvlink2"  # the lab's profile for the pair names it
    assert any(n.startswith("stock vLLM cannot load AWQ-INT4 on this card: it needs compute capability 7.5")
               for n in r["notes"])
    assert not any("FALLBACK, lab/data/calibration.yaml has no vLLM GPU entry" in n for n in r["notes"])
    m = card_speed.predict(card_speed.Ask(gpu="V100 32GB", gpus=2, engine="vllm", spec="draft-mtp"))
    assert m["why_not"] is None and m["predicted_tok_s"] > r["predicted_tok_s"] and "MTP (4 speculative" in m["route"]


def test_predict_split_tensor_warns_as_plan():
    r = card_speed.predict(card_speed.Ask(gpu="V100 32GB", gpus=2, split="tensor"))
    assert r["notes"][0] == routes.split_warning("llama.cpp", "tensor", False) and "#27750" in r["notes"][0]
    m = card_speed.predict(card_speed.Ask(gpu="V100 32GB", gpus=2, split="tensor", spec="draft-mtp"))
    assert "#27122" in m["notes"][0] and "LLAMA_GRAPH_REUSE_DISABLE=1" in m["notes"][0]


def test_stock_vllm_notes_follow_the_compat_rule():
    assert vllm_speed.stock_vllm_notes("ampere", "AWQ-INT4") == []
    assert vllm_speed.stock_vllm_notes("volta", "GPTQ-INT4") == []
    assert vllm_speed.stock_vllm_notes("volta", "FP8")[0].startswith("stock vLLM cannot load FP8")


def test_the_h100_run_checks_the_model_until_a_second_load_joins_the_fit():
    # outputs/h100-vllm/20261207T232425Z_92e00066: FP8 stand-in, one stream, 12.66 ms a token (TPOT)
    run = next(s for s in vllm_speed.measured_steps() if s["id"] == "h100-vllm-tp1")
    assert (run["gpu_id"], run["plain_ms"], run["bytes_per_token"], run["weights"]) == ("h100-sxm", 12.66, 27090640384, "fp8")
    assert "h100-vllm-tp1" not in vllm_speed.model().plain_rows  # one load: its fraction cannot be told from the fixed cost
    (check,) = vllm_speed.measured_checks()
    assert (check["id"], round(check["predicted_ms"], 2), round(check["error_pct"], 1)) == ("h100-vllm-tp1", 12.22, -3.5)
    second = {**run, "id": "h100-second-load", "plain_ms": 8.0, "bytes_per_token": 15.39e9, "mtp_ms_per_step": {1: 10.5}}
    m = vllm_speed.fit(steps=[run, second])
    assert {"h100-vllm-tp1", "h100-second-load"} <= set(m.plain_rows) and "hopper" in m.fraction_by_arch
    assert m.draft_ms is not None


def test_validate_prints_the_vllm_rows(capsys):
    from lab.predict import predict_cli

    assert predict_cli.main(["--validate"]) == 0
    out = capsys.readouterr().out
    assert "vLLM model (lab.predict.vllm_speed) on the fork's published rows:" in out
    # 53.9 since Hopper's own fixed cost (Volta fraction 0.695; was 54.1)
    assert "v100-32g-x2-1cat-awq-tp2-plain [depth, TP2]: published 58.46, in sample 53.9 (-8%), held out 53.9" in out


def test_plan_mode_speeds_of_a_vllm_profile_are_the_vllm_models():
    from lab.predict import plan_speeds

    rows = plan_speeds.rows(profiles.load("v100-32g-x2-vllm"))
    # since Hopper's own fixed cost (Volta fraction 0.703 -> 0.695, fixed 4.21 -> 4.13 ms, draft 2.79 -> 2.75 ms;
    # was 56.6, 91.7, 113.8, 127.4, 135.6 and 52.4-60.8)
    assert [r["tok_s"] for r in rows] == [56.4, 91.6, 113.9, 127.8, 136.1]
    assert rows[0]["uncertainty"] == "±8% held out (52.0-60.8)"  # the fork's TP2 row, not fitted: -7.8 %
    assert rows[4]["what"] == "one stream, vLLM MTP 4 speculative tokens (predicted)"
    assert rows[4]["uncertainty"].startswith("at least ±8%") and "none held out" in rows[4]["uncertainty"]


def test_predict_asks_a_vllm_row_as_the_vllm_check_predicts_it():
    """One answer per row: --validate's coverage (each public row asked of lab predict, lab.predict.card_setup.ask_of)
    and the vLLM check give every fitted-card vLLM row the same tok/s - its link (the fork's NVLink when unstated),
    its fp8 KV, its own k and tokens per step. Before: TP4 asked over PCIe (76.9 against the fit's 86.3), fp8 KV
    read as f16, MTP rows at k = 4 and the mean tokens per step."""
    from lab.predict import public_coverage

    check = {x["id"]: x["in_sample"] for x in vllm_speed.check()["rows"]}
    asked = {x["id"]: x["predicted"] for x in public_coverage.coverage()["rows"] if x["id"] in check}
    assert set(asked) == set(check) and len(check) == 7
    # rel 1e-3: a row without a depth is read at 512 tokens by the check, at predict's default depth by predict (the
    # KV of a few thousand tokens more: 86.26 against 86.28 on the TP4 row)
    assert all(asked[i] == pytest.approx(check[i], rel=1e-3) for i in check), (asked, check)
    assert round(asked["v100-32g-x4-1cat-awq-tp4-plain"], 1) == 86.3  # the fit's one plain point, published 86.31


@pytest.mark.parametrize("name", ["h100-vllm", "h200-vllm"])
def test_a_hopper_vllm_profile_is_a_labelled_fallback_in_plan_and_predict(name):
    """No vLLM row or measured step on Hopper yet (calibration.yaml vllm_step_costs' H100 slot is empty): lab plan and
    lab predict give the same speed, each saying FALLBACK; the memory line's parts are positive and add up (vLLM
    budgets one full-length sequence: its KV and one sequence's state, never every slot's state)."""
    from lab.predict import plan

    prof = profiles.load(name)
    p = plan.plan(prof)
    got = card_speed.predict(card_speed.Ask(gpu=prof.gpu_name_pattern, engine="vllm", quant="FP8", kv="auto",
                                            context=prof.context_tokens, slots=prof.parallel_slots,
                                            gpu_util=prof.gpu_memory_utilization,
                                            depth=prof.bench_prompt_tokens + prof.bench_output_tokens // 2))
    assert got["predicted_tok_s"] == pytest.approx(p["predicted_decode_tok_s"], rel=1e-9)
    assert "FALLBACK: no vLLM rows of hopper" in p["roofline"]["prediction_basis"]
    assert "FALLBACK: no vLLM rows of hopper" in got["model"]["vllm"]
    text = plan.describe(p)
    assert "KV 2.00 GiB (64 KiB/token at bf16, full-attention layers, one full-length sequence) + recurrent state " \
           "0.15 GiB" in " ".join(text.split())
    # the lead's H100 (2026-12-07): vLLM's log put the FP8 stand-in's weights at 27.64 GiB; the plan says 27.42
    assert p["memory"]["weights_bytes"] / 2**30 == pytest.approx(27.64, rel=0.01)
