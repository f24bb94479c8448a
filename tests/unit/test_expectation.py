"""One expectation per card (lab.predict.profile_speed.expectation): the answer box's expected speed and ceiling are
the figures notebook 06 measured against when it ran, and a measurement well under the expectation is said so."""
import pytest

from lab.core import profiles
from lab.predict import profile_speed
from lab.records import answer

# notebook 06's summary on the lent H100 (../shared gpu-runs 2026-12-07: ceiling on the measured copy bandwidth 205,
# predicted 112.2, served one stream 85.4) - the answer box once showed the plan's datasheet ceiling (229) beside it
H100_06 = {"06_benchmark": {"summary": {"decode_ceiling_tok_s": 205.0, "predicted_decode_tok_s": 112.2,
                                        "served_single_stream_decode_tok_s": 85.4}}}


def test_the_run_s_own_figures_and_the_shortfall():
    prof = profiles.load("h200-x1")
    e = profile_speed.expectation(prof, H100_06)
    assert (e["ceiling_tok_s"], e["expected_tok_s"], e["measured_tok_s"]) == (205.0, 112.2, 85.4)
    assert e["shortfall"] == pytest.approx(85.4 / 112.2 - 1) and e["well_under"]
    assert e["sentence"] == ("measured 85.4 tok/s, 24% under the expected 112 tok/s - well under: the prediction does "
                             "not hold on this card and build")


def test_without_a_run_the_plan_s_figures_and_no_sentence():
    prof = profiles.load("v100-32g-x1")
    e = profile_speed.expectation(prof)
    rl = profile_speed.roofline_for(prof)
    assert (e["ceiling_tok_s"], e["expected_tok_s"]) == (rl["decode_ceiling_tok_s"], rl["predicted_decode_tok_s"])
    assert e["sentence"] is None and not e["well_under"]


def test_the_answer_box_shows_one_ceiling_and_the_shortfall():
    prof = profiles.load("h200-x1")
    row = answer.card_row(prof, H100_06)
    assert row["ceiling, one stream"] == "205 tok/s" and row["expected, one stream"] == "112 tok/s"
    assert row["measured against expected"].startswith("measured 85.4 tok/s, 24% under")
    assert "measured against expected" not in answer.card_row(prof)
