"""lab.predict.served_speed: the served aggregate at 8 and 16 streams with host sampling and with -bs, fitted on the
lab's H200 and H100 runs (lab/data/served_overhead.yaml served_streams) and checked with each card left out."""
import pytest

from lab.core import profiles
from lab.predict import plan, served_speed


def test_server_terms_are_fitted_and_physical():
    host, bs = served_speed.terms("host"), served_speed.terms("backend")
    # host sampling: 0.79 ms per stream (the sampler chain over 248,320 tokens, detokenise, stream) + 13.7 ms a step
    assert round(host["per_stream_ms"], 2) == 0.79 and round(host["per_step_ms"], 1) == 13.7
    # -bs moves the sampling into the graph: the per-stream term goes (held at 0, never negative)
    assert bs["per_stream_ms"] == 0.0 and round(bs["per_step_ms"], 1) == 11.8
    assert host["points"] == ["h200-2026-12-04", "h100-2026-12-07"]


def test_each_hopper_card_predicted_from_the_other_within_10_percent():
    """The issue's target: the 8- and 16-stream aggregate on the H200 and the H100, with and without -bs, within
    10 % - here with the predicted card left out of the fit (3.1 % at most)."""
    result = served_speed.check()
    got = {(r["card"], r["mode"], r["streams"]): round(r["predicted"], 1) for r in result["rows"] if r["streams"] > 1}
    assert got == {("h200", "host", 8): 170.2, ("h200", "host", 16): 279.8, ("h200", "backend", 8): 202.1,
                   ("h200", "backend", 16): 374.4, ("h100-sxm", "host", 8): 164.3, ("h100-sxm", "host", 16): 274.1,
                   ("h100-sxm", "backend", 8): 201.8, ("h100-sxm", "backend", 16): 365.6}
    assert result["max_abs_error"] < 0.032
    measured = {(r["card"], r["mode"], r["streams"]): r["measured"] for r in result["rows"]}
    assert measured[("h100-sxm", "backend", 16)] == 368.4 and measured[("h100-sxm", "host", 16)] == pytest.approx(272.7)


def test_plan_shows_the_aggregate_with_and_without_bs():
    p = plan.plan("h200-x1")
    rows = {r["streams"]: r for r in p["served_streams"]["rows"]}
    # in sample on the H200: 16 streams 279.8 measured 281.4 (host), 376 vs 382.9 (-bs)
    assert round(rows[16]["host_tok_s"]) == 280 and round(rows[16]["bs_tok_s"]) == 376
    assert abs(rows[16]["bs_tok_s"] / 382.9 - 1) < 0.10 and abs(rows[16]["host_tok_s"] / 281.4 - 1) < 0.10
    assert "with -bs 376 (+34%)" in plan.describe(p)


def test_an_unmeasured_card_is_a_prediction_said_so():
    p = plan.plan("v100-32g-x1")
    r = {x["streams"]: x for x in p["served_streams"]["rows"]}[16]
    assert r["batched_from"].startswith("FALLBACK") and round(r["host_tok_s"]) == 212 and round(r["bs_tok_s"]) == 263
    cpu = profiles.load("v100-32g-x1").model_copy(update={"gpu_count": 0})
    assert served_speed.profile_rows(cpu, 34.6) == []
