"""lab.predict.routes: every route for the two V100 profiles (lab/data/routes.yaml), with its real values."""
import pytest

from lab.core import profiles
from lab.predict import mtp_model, plan, routes


def _table(name):
    return routes.route_table(profiles.load(name))


def _speeds(table):
    return {r["id"]: (round(r["tok_s"], 1), r["basis"], r["fits"]) for r in table["routes"]}


def test_two_v100_routes_speeds_bases_and_the_fastest():
    t = _table("v100-32g-x2-nvlink")
    assert _speeds(t) == {
        "llama-layer": (34.6, "predicted", True),  # per-token model + one NVLink hop; published pair: 35.7
        # 34.6 plain x 2.56 tokens per step (rate 0.78, the 16 GB pair's n-max 2) ÷ a 1.75-plain-token Volta step
        "llama-layer-mtp": (50.6, "predicted (MTP step model)", True),
        "llama-tensor": (57.5, "predicted", True),  # tp_model over NVLink 2.0 (pessimistic bound)
        # 57.5 x 1.88 (rate 0.88 at n-max 1) ÷ 1.57: Volta's 8.72 ms per draft weighs more on a faster plain token
        "llama-tensor-mtp": (68.9, "predicted (MTP step model)", True),
        # the vLLM model (lab.predict.vllm_speed): 15.39 GB ÷ (2 x 0.69 x 900 GB/s) + 4.13 ms + 1.30 ms of all-reduces
        "fork-tp2": (56.4, "predicted (vLLM model)", True),
        # Qwen3.6 FP8 rows (Qwen3.8 FP8 is TP4 on the fork): predicted, shown, never ranked
        "fork-tp2-mtp": (102.7, "predicted (vLLM model)", True),
    }
    assert (t["fastest"], t["fastest_llama_cpp"]) == ("llama-tensor-mtp", "llama-tensor-mtp")
    by = {r["id"]: r for r in t["routes"]}
    # the token embedding stays in host memory in both split modes; -sm layer puts whole layers on each card, the
    # output head with the last (the fuller card: 8.22 GB of weights), -sm tensor halves every matrix (7.91 GB)
    assert round(by["llama-layer"]["per_card_bytes"] / 1e9, 2) == 18.73
    assert round(by["llama-tensor"]["per_card_bytes"] / 1e9, 2) == 18.45
    assert round(by["fork-tp2"]["per_card_bytes"] / 1e9, 2) == 17.54
    assert not by["fork-tp2-mtp"]["applies"] and "Qwen3.6-27B FP8" in by["fork-tp2-mtp"]["why_not"]
    assert by["fork-tp2"]["applies"] and by["fork-tp2"]["mtp_published"]["id"] == "v100-32g-x2-1cat-awq-tp2-plain"
    # the fork's TP2 row (16K deep, not fitted) predicted by the model: 53.9 against 58.46, -7.8 %
    assert round(by["fork-tp2"]["mtp_published"]["error"], 3) == -0.078
    # -sm tensor routes carry the reported failures (routes.yaml known_issues), the MTP one the hangs
    assert "#27750" in by["llama-tensor"]["warning"] and "#27122" in by["llama-tensor-mtp"]["warning"]
    assert by["llama-layer"]["warning"] is None and by["fork-tp2"]["warning"] is None
    assert by["llama-tensor"]["flags"] == "-sm tensor -fa on -ctk f16 -ctv f16"
    assert "optimistic bound 63.5" in by["llama-tensor"]["how"]
    assert [p["id"] for p in by["llama-layer"]["published"]] == ["v100-sxm2-16g-x2-layer-plain"]
    layer, tensor = by["llama-layer-mtp"], by["llama-tensor-mtp"]
    # n-max 2: the best of the sweep shown (50.6 > 50.4 at n-max 4); the pair's published sweep found n-max 4 (59.1)
    # and is named beside it; the published n-max 2 row (57.5): predicted 50.6, -12 %
    assert layer["flags"] == "-sm layer -ts 1,1 --spec-type draft-mtp --spec-draft-n-max 2"
    assert [round(x["tok_s"], 1) for x in layer["mtp_sweep"]] == [47.3, 50.6, 47.3, 50.4]
    assert round(layer["tok_s"], 1) == max(round(x["tok_s"], 1) for x in layer["mtp_sweep"])
    assert "published sweep: n-max 4, v100-sxm2-16g-x2-layer-mtp-n4" in layer["mtp_n_from"]
    assert layer["mtp_published"]["id"] == "v100-sxm2-16g-x2-layer-mtp-n2"
    assert round(layer["mtp_published"]["error"], 3) == -0.120 and layer["mtp_published"]["same_card"]
    # no V100 tensor-split sweep: the predicted best n-max (1); the A5000 pair's n-max 2 row beside it (-16.6 %:
    # another card, Ampere's step is cheaper than Volta's)
    assert tensor["flags"].endswith("--spec-type draft-mtp --spec-draft-n-max 1") and tensor["mtp_n_from"] == "the predicted best"
    assert [round(x["tok_s"], 1) for x in tensor["mtp_sweep"]] == [68.9, 68.1, 61.8, 61.0]
    assert tensor["mtp_published"]["id"] == "rtxa5000-x2-tensor-mtp-n2" and not tensor["mtp_published"]["same_card"]
    assert round(tensor["mtp_published"]["error"], 3) == -0.16


def test_one_v100_routes():
    t = _table("v100-32g-x1")
    assert _speeds(t) == {"llama-one": (34.6, "predicted", True),
                          "llama-one-mtp": (49.5, "predicted (MTP step model)", True),
                          # the fork at 262,144 tokens: no fit; predicted by the vLLM model at MTP 3
                          "fork-tp1-mtp": (89.7, "predicted (vLLM model)", False)}
    assert t["fastest"] == t["fastest_llama_cpp"] == "llama-one-mtp"
    mtp = next(r for r in t["routes"] if r["id"] == "llama-one-mtp")
    # 34.6 plain x 2.50 tokens per step (rate 0.75 at n-max 2, v100-32g-b10358-mtp-n2) ÷ a 1.75-plain-token step
    assert "34.6 plain x 2.50 tok/step (rate 0.75) / step 1.75 plain tokens (volta)" == mtp["how"]
    assert [round(x["tok_s"], 1) for x in mtp["mtp_sweep"]] == [47.3, 49.5, 47.3, 45.7]
    assert [x["rows"] for x in mtp["mtp_sweep"]] == [["v100-32g-b10358-mtp-n1"], ["v100-32g-b10358-mtp-n2"],
                                                     ["v100-32g-b10358-mtp-n3"], ["v100-32g-b10358-mtp-n4"]]
    # the card's published sweep picks n-max 2 (48.09), the model's best too (49.5)
    assert mtp["mtp_n_max"] == 2 and mtp["flags"] == "--spec-type draft-mtp --spec-draft-n-max 2"
    assert mtp["mtp_published"]["id"] == "v100-32g-b10358-mtp-n2" and round(mtp["mtp_published"]["error"], 3) == 0.028


def test_profiles_without_routes_get_none_and_plan_renders_within_100_columns():
    assert routes.route_table(profiles.load("rtx4090-24g")) is None
    for name in ("v100-32g-x2-nvlink", "v100-32g-x1"):
        lines = plan.routes_lines(plan.plan(name)["routes"])
        assert lines and all(len(x) <= 100 for x in lines), [x for x in lines if len(x) > 100]
        # wrapped at words, never cut: every route's needs and warning text appears whole
        text = " ".join(" ".join(lines).split())
        for r in plan.plan(name)["routes"]["routes"]:
            assert " ".join(r["needs"].split()) in text and (r["warning"] is None or r["warning"] in text)
        assert lines[0].startswith("  routes, one stream")
        text = "\n".join(lines)
        assert "MTP model vs 26 public draft-mtp rows, in sample: median |error| 2.2%, max 15.4%" in text
        assert "targets 10/20% met; by architecture:\n        ada 0%/1%, ampere 1%/2%, blackwell 4%/10%, pascal 0%/0%, " \
               "rdna3 3%/3%" in text
        assert "held out, one row left out of the fit: 4%/27%" in text and "volta 8%/21%" in " ".join(text.split())
        assert "held out, one card left out: 27%/53%" in text and "python -m lab predict --validate" in text


def test_mtp_speed_is_the_one_place_for_mtp_figures():
    rows = {r.id: r for r in routes.public_speed.load()}
    route = {"engine": "llama.cpp", "flags": "", "published": ["v100-32g-b10358-mtp-n2"]}
    got = routes.mtp_speed(route, 33.62, rows, "v100-32g", "none")
    # the V100's published plain speed in: 33.62 x 2.5 ÷ 1.734 (Volta's step) = 48.5 at n-max 2 (published 48.09)
    assert got["n_max"] == 2 and got["tok_s"] == pytest.approx(33.62 * 2.5 / mtp_model.step_over_plain(2, 33.62, "volta")[0])
    assert round(got["tok_s"], 1) == 48.5
    assert got["basis"] == "predicted (MTP step model)" and got["published"]["tok_s"] == 48.09
    assert routes.mtp_speed(route, None, rows, "v100-32g", "none")["tok_s"] is None


def test_fork_routes_are_the_vllm_model_as_lab_predict():
    """One answer: a fork route's figure is lab.predict.vllm_speed.setup_speed's, which `lab predict --engine vllm`
    prints for the same set-up."""
    from lab.predict import card_speed, vllm_speed

    t = _table("v100-32g-x2-nvlink")
    fork = next(r for r in t["routes"] if r["id"] == "fork-tp2")
    ask = card_speed.predict(card_speed.Ask(gpu="V100 32GB", gpus=2, engine="vllm"))
    assert round(ask["predicted_tok_s"], 1) == round(fork["tok_s"], 1) == 56.4
    assert any("stock vLLM cannot load AWQ-INT4" in n for n in ask["notes"])
    x = vllm_speed.setup_speed("v100-32g", 2, "AWQ-INT4", 640, "f16", "v100-sxm2-nvlink2")
    assert x["tok_s"] == pytest.approx(fork["tok_s"])


def test_the_fork_installs_as_one_wheel_and_supports_qwen38_fp8_at_tp4():
    """1Cat-vLLM since 1.2.1: one 1cat_vllm-*.whl that bundles flash_attn_v100; 1.3.0 (2026-08-17) added Qwen3.8-27B
    FP8 at TP4 (pull #229); each fact with its source URL."""
    fork = routes.data()["fork"]
    install = " ".join(fork["install"])
    assert "./1cat_vllm-*.whl" in install and "flash_attn_v100" not in install
    assert "bundles the flash_attn_v100" in fork["install_note"]
    assert "Qwen3.8-27B" in fork["current"] and "TP4" in fork["current"]
    for url in ("https://github.com/1CatAI/1Cat-vLLM/releases/tag/v1.3.0", "https://github.com/1CatAI/1Cat-vLLM/pull/229",
                "https://github.com/1CatAI/1Cat-vLLM/blob/main/README.md"):
        assert any(s.startswith(url) for s in fork["sources"]), url
    issues = routes.data()["llama_tensor_split"]["known_issues"]
    assert issues["mtp_workaround_env"] == {"LLAMA_GRAPH_REUSE_DISABLE": "1"}
    assert all(s.startswith("https://github.com/ggml-org/llama.cpp/") and "read 2026-12-05" in s for s in issues["sources"])
