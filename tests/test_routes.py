"""lab.predict.routes: every route for the two V100 profiles (lab/data/routes.yaml), with its real values."""
import pytest

from lab.core import profiles
from lab.predict import plan, routes


def _table(name):
    return routes.route_table(profiles.load(name))


def _speeds(table):
    return {r["id"]: (round(r["tok_s"], 1), r["basis"], r["fits"]) for r in table["routes"]}


def test_two_v100_routes_speeds_bases_and_the_fastest():
    t = _table("v100-32g-x2-nvlink")
    assert _speeds(t) == {
        "llama-layer": (33.8, "predicted", True),  # per-token model + one NVLink hop; published pair: 35.7
        # 33.8 plain x 3.64 tokens per step (rate 0.66, the 16 GB pair's n-max 4) ÷ a 2.12-plain-token step
        "llama-layer-mtp": (58.0, "predicted (H200 MTP step)", True),
        "llama-tensor": (55.8, "predicted", True),  # tp_model over NVLink 2.0 (pessimistic bound)
        "llama-tensor-mtp": (91.2, "predicted (H200 MTP step)", True),  # 55.8 x 3.47 (rate 0.62) ÷ 2.12
        "fork-tp2": (58.5, "published", True),
        "fork-tp2-mtp": (102.7, "published", True),
    }
    assert (t["fastest"], t["fastest_llama_cpp"]) == ("fork-tp2-mtp", "llama-tensor-mtp")
    by = {r["id"]: r for r in t["routes"]}
    # the token embedding stays in host memory in both split modes; -sm layer puts whole layers on each card, the
    # output head with the last (the fuller card: 8.22 GB of weights), -sm tensor halves every matrix (7.91 GB)
    assert round(by["llama-layer"]["per_card_bytes"] / 1e9, 2) == 18.73
    assert round(by["llama-tensor"]["per_card_bytes"] / 1e9, 2) == 18.45
    assert round(by["fork-tp2"]["per_card_bytes"] / 1e9, 2) == 17.54
    assert by["llama-tensor"]["flags"] == "-sm tensor -fa on -ctk f16 -ctv f16"
    assert "optimistic bound 62.1" in by["llama-tensor"]["how"]
    assert [p["id"] for p in by["llama-layer"]["published"]] == ["v100-sxm2-16g-x2-layer-plain"]
    layer, tensor = by["llama-layer-mtp"], by["llama-tensor-mtp"]
    # n-max 4 from the pair's published sweep (57.5 at 2, 59.1 at 4); predicted 58.0 against 59.1: -1.9 %
    assert layer["flags"] == "-sm layer -ts 1,1 --spec-type draft-mtp --spec-draft-n-max 4"
    assert [round(x["tok_s"], 1) for x in layer["mtp_sweep"]] == [47.5, 53.2, 51.1, 58.0]
    assert layer["mtp_published"]["id"] == "v100-sxm2-16g-x2-layer-mtp-n4"
    assert round(layer["mtp_published"]["error"], 3) == -0.019 and layer["mtp_published"]["same_card"]
    # no V100 tensor-split sweep: the predicted best n-max (4); the A5000 pair's n-max 2 row beside it (+7.7 %)
    assert tensor["flags"].endswith("--spec-type draft-mtp --spec-draft-n-max 4") and tensor["mtp_n_from"] == "the predicted best"
    assert [round(x["tok_s"], 1) for x in tensor["mtp_sweep"]] == [78.5, 86.7, 84.3, 91.2]
    assert tensor["mtp_published"]["id"] == "rtxa5000-x2-tensor-mtp-n2" and not tensor["mtp_published"]["same_card"]
    assert round(tensor["mtp_published"]["error"], 3) == 0.069


def test_one_v100_routes():
    t = _table("v100-32g-x1")
    assert _speeds(t) == {"llama-one": (33.8, "predicted", True),
                          "llama-one-mtp": (51.9, "predicted (H200 MTP step)", True),
                          "fork-tp1-mtp": (40.0, "published", False)}  # the fork at 262,144 tokens: no fit
    assert t["fastest"] == t["fastest_llama_cpp"] == "llama-one-mtp"
    mtp = next(r for r in t["routes"] if r["id"] == "llama-one-mtp")
    # 33.8 plain x 2.50 tokens per step (rate 0.75 at n-max 2, v100-32g-b10358-mtp-n2) ÷ a 1.63-plain-token step
    assert "33.8 plain x 2.50 tok/step (rate 0.75) / step 1.63 plain tokens (H200)" == mtp["how"]
    assert [round(x["tok_s"], 1) for x in mtp["mtp_sweep"]] == [47.6, 51.9, 51.1, 52.6]
    assert [x["rows"] for x in mtp["mtp_sweep"]] == [["v100-32g-b10358-mtp-n1"], ["v100-32g-b10358-mtp-n2"],
                                                     ["v100-32g-b10358-mtp-n3"], ["v100-32g-b10358-mtp-n4"]]
    # the card's published sweep picks n-max 2 (48.09), although the model rates n-max 4 highest (52.6): it
    # over-rates Volta's longer steps (+17 % at n-max 4, lab.predict.public_check.mtp_check)
    assert mtp["mtp_n_max"] == 2 and mtp["flags"] == "--spec-type draft-mtp --spec-draft-n-max 2"
    assert mtp["mtp_published"]["id"] == "v100-32g-b10358-mtp-n2" and round(mtp["mtp_published"]["error"], 3) == 0.08


def test_profiles_without_routes_get_none_and_plan_renders_within_100_columns():
    assert routes.route_table(profiles.load("rtx4090-24g")) is None
    for name in ("v100-32g-x2-nvlink", "v100-32g-x1"):
        lines = plan.routes_lines(plan.plan(name)["routes"])
        assert lines and all(len(x) <= 100 for x in lines), [x for x in lines if len(x) > 100]
        assert lines[0].startswith("  routes, one stream")
        text = "\n".join(lines)
        assert "MTP model vs 19 public draft-mtp rows: median |error| 11.7%, max 36.0% (targets 10/20%: NOT met)" in text
        assert "volta 9%/17%" in text and "5 rows over 20%, all ada/blackwell" in text


def test_mtp_speed_is_the_one_place_for_mtp_figures():
    rows = {r.id: r for r in routes.public_speed.load()}
    route = {"engine": "llama.cpp", "flags": "", "published": ["v100-32g-b10358-mtp-n2"]}
    got = routes.mtp_speed(route, 33.62, rows, "v100-32g", "none")
    # the V100's published plain speed in: 33.62 x 2.5 ÷ 1.6267 = 51.7 at n-max 2 (published 48.09: +7.5 %)
    assert got["n_max"] == 2 and got["tok_s"] == pytest.approx(33.62 * 2.5 / (18.862 / 11.595))
    assert got["basis"] == "predicted (H200 MTP step)" and got["published"]["tok_s"] == 48.09
    assert routes.mtp_speed(route, None, rows, "v100-32g", "none")["tok_s"] is None
    fork = {"engine": "1Cat-vLLM", "flags": "f", "published": ["v100-32g-1cat-awq-mtp-n3"],
            "plain_row": "v100-32g-1cat-awq-plain"}
    got = routes.mtp_speed(fork, None, rows)
    assert (got["tok_s"], got["basis"]) == (40.0, "published") and "2.00x the plain 20" in got["how"]
