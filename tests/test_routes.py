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
        "llama-layer": (34.2, "predicted", True),  # per-token model + one NVLink hop; published pair: 35.7
        "llama-layer-mtp": (59.1, "published", True),  # 2x V100-SXM2-16GB, n-max 4
        "llama-tensor": (56.2, "predicted", True),  # tp_model over NVLink 2.0 (pessimistic bound)
        "llama-tensor-mtp": (87.8, "predicted x published MTP ratio", True),  # 56.2 x 81.1/51.9 (A5000 pair)
        "fork-tp2": (58.5, "published", True),
        "fork-tp2-mtp": (102.7, "published", True),
    }
    assert (t["fastest"], t["fastest_llama_cpp"]) == ("fork-tp2-mtp", "llama-tensor-mtp")
    by = {r["id"]: r for r in t["routes"]}
    # the token embedding stays in host memory in both split modes: the same bytes per card
    assert round(by["llama-layer"]["per_card_bytes"] / 1e9, 2) == 18.45
    assert round(by["llama-tensor"]["per_card_bytes"] / 1e9, 2) == 18.45
    assert round(by["fork-tp2"]["per_card_bytes"] / 1e9, 2) == 17.54
    assert by["llama-tensor"]["flags"] == "-sm tensor -fa on -ctk f16 -ctv f16"
    assert "optimistic bound 62.7" in by["llama-tensor"]["how"]
    assert [p["id"] for p in by["llama-layer"]["published"]] == ["v100-sxm2-16g-x2-layer-plain"]


def test_one_v100_routes():
    t = _table("v100-32g-x1")
    assert _speeds(t) == {"llama-one": (34.2, "predicted", True), "llama-one-mtp": (48.1, "published", True),
                          "fork-tp1-mtp": (40.0, "published", False)}  # the fork at 262,144 tokens: no fit
    assert t["fastest"] == t["fastest_llama_cpp"] == "llama-one-mtp"
    mtp = next(r for r in t["routes"] if r["id"] == "llama-one-mtp")
    assert "1.43x the plain 33.62" in mtp["how"]


def test_profiles_without_routes_get_none_and_plan_renders_within_100_columns():
    assert routes.route_table(profiles.load("rtx4090-24g")) is None
    for name in ("v100-32g-x2-nvlink", "v100-32g-x1"):
        lines = plan.routes_lines(plan.plan(name)["routes"])
        assert lines and all(len(x) <= 100 for x in lines), [x for x in lines if len(x) > 100]
        assert lines[0].startswith("  routes, one stream")


def test_mtp_speed_is_the_one_place_for_mtp_figures():
    rows = {r.id: r for r in routes.public_speed.load()}
    route = {"published": ["v100-32g-b10358-mtp-n2"], "plain_row": "v100-32g-b10358-plain"}
    tok_s, basis, how = routes.mtp_speed(route, None, rows)
    assert (tok_s, basis) == (48.09, "published") and "1.43x" in how
    tok_s, basis, _ = routes.mtp_speed({"mtp_ratio": ["rtxa5000-x2-tensor-mtp-n2", "rtxa5000-x2-tensor-plain"]},
                                       50.0, rows)
    assert basis == "predicted x published MTP ratio" and tok_s == pytest.approx(50.0 * 81.1 / 51.9)
