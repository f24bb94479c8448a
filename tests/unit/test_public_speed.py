"""The public decode-speed dataset (lab/data/public_speed.yaml) and the per-token model checked against it (pure)."""
import pytest

from lab.core import profiles
from lab.predict import plan, public_check, public_speed, roofline


def test_dataset_loads_with_sources_quotes_and_positive_speeds():
    rows = public_speed.load()
    assert len(rows) == 74 and len({r.id for r in rows}) == 74
    for r in rows:
        assert r.source.startswith("https://") and len(r.quote) >= 3 and r.measured is True
        assert r.decode_tok_s > 0 and (r.prompt_tok_s is None or r.prompt_tok_s > 0)
    # the rows the issue named, with their published numbers
    by_id = {r.id: r for r in rows}
    v100 = by_id["v100-32g-b10358-plain"]
    assert (v100.decode_tok_s, v100.kv_type, v100.context_tokens, v100.speculative) == (33.62, "f16", 4096, None)
    mtp = by_id["v100-32g-b10358-mtp-n2"]
    assert mtp.decode_tok_s == 48.09 and mtp.speculative.n_max == 2 and mtp.speculative.type == "draft-mtp"
    assert mtp.speculative.acceptance == "0.75"
    cards = {r.gpu_id for r in rows}
    assert {"v100-32g", "v100-16g", "rtx-3090", "rtx-3090-ti", "rtx-4090", "rtx-4060-ti-16g", "rtx-5060-ti-16g"} <= cards
    assert sum(r.speculative is not None for r in rows) == 35 and sum(r.speculative is None for r in rows) == 39


def _good_row(**change) -> dict:
    row = {"id": "x", "model": "Qwen3.8-27B", "gpu": "RTX 4090", "gpu_id": "rtx-4090", "gpu_count": 1,
           "engine": "llama.cpp", "split_mode": "none", "speculative": None, "decode_tok_s": 40.0, "method": "m",
           "source": "https://example.org/x", "quote": "40 tok/s", "measured": True}
    row.update(change)
    return {k: v for k, v in row.items() if v is not ...}


@pytest.mark.parametrize("change, words", [
    ({"source": ...}, "field 'source'"),
    ({"source": "a forum post"}, "URL"),
    ({"quote": ...}, "field 'quote'"),
    ({"decode_tok_s": -3.0}, "field 'decode_tok_s'"),
    ({"measured": False}, "field 'measured'"),
    ({"colour": "red"}, "field 'colour'"),
    ({"gpu_id": "rtx-9999"}, "not in lab/data/calibration.yaml gpus"),
])
def test_a_bad_row_gives_a_clear_error(change, words):
    assert public_speed.validate_rows([_good_row()])[0].decode_tok_s == 40.0
    with pytest.raises(public_speed.PublicSpeedError) as exc:
        public_speed.validate_rows([_good_row(**change)], "test.yaml")
    msg = str(exc.value)
    assert words in msg and "row 'x'" in msg and "test.yaml" in msg and "\n" not in msg


def test_bytes_per_token_counts_file_kv_at_depth_and_state():
    row = {r.id: r for r in public_speed.load()}["v100-32g-b10358-depth31k-plain"]
    state = public_speed._arch().linear_state_bytes_per_seq
    # the file less what plain decoding does not read (calibration.yaml read_per_token): token_embd (host memory,
    # 715,161,600 B at Q4_K) and the MTP block of a Qwen3.8-27B file (263,313,408 B at Q4_K_M's mix)
    assert public_speed.not_read_bytes(row) == 715_161_600 + 263_313_408
    assert public_speed.bytes_per_token(row) == 17.11e9 - 978_475_008 + 31006 * 65536 + state


def test_per_token_model_fit_on_h200_and_public_rows():
    m = roofline.per_token_model()
    assert m.fixed_ms_by_family == {"qwen35": pytest.approx(3.65), "dense": pytest.approx(2.5158, abs=1e-3)}
    f = m.fraction_by_arch
    assert set(f) == {"volta", "ampere", "ada", "blackwell", "hopper"}
    assert f["volta"] == pytest.approx(0.6863, abs=1e-3) and f["ampere"] == pytest.approx(0.8212, abs=1e-3)
    assert f["ada"] == pytest.approx(0.9235, abs=1e-3) and f["blackwell"] == pytest.approx(0.9288, abs=1e-3)
    assert f["hopper"] == pytest.approx(0.4158, abs=1e-3) and max(f.values()) <= 1.0
    assert len(m.rows_by_arch["volta"]) == 4 and m.rows_by_arch["hopper"] == ("h200-tg128-qwen35-hybrid-shape",)
    # the lab's own H200 points are reproduced exactly (Hopper's fraction and the dense fixed cost come from them),
    # at the bytes they read per token: the file's tensors less token_embd (calibration.yaml token_embd_bytes)
    assert m.predict_tok_s(15138093056 - 715161600, 4800, "datasheet", "qwen35", "hopper") == pytest.approx(91.85, rel=1e-9)
    assert m.predict_tok_s(18436147118 - 437575680, 4800, "datasheet", "dense", "hopper") == pytest.approx(86.6, rel=1e-9)
    # a measured copy is read in datasheet terms through the H200's copy ÷ datasheet (4227 ÷ 4800)
    assert m.copy_fraction_of_datasheet == 4227 / 4800
    assert m.predict_tok_s(18436147118 - 437575680, 4227, "copy", "dense", "hopper") == pytest.approx(86.6, rel=1e-9)


def test_check_meets_the_targets_on_the_budget_cards():
    result = public_check.check()
    comp, every = result["comparable"], result["all"]
    assert comp["n"] == 18 and comp["median_abs_error"] == pytest.approx(0.01498, abs=1e-4)
    assert comp["max_abs_error"] == pytest.approx(0.07683, abs=1e-4)
    assert comp["median_abs_error"] <= public_check.TARGET_MEDIAN and comp["max_abs_error"] <= public_check.TARGET_MAX
    assert result["targets"]["met"] is True
    # honest about the rest: the worst predicted row is the 2-bit IQ2_XXS file, an outlier with its reason (its token
    # embedding is sized as Q4_K_M's, the lab models no IQ2_XXS mix), then the release-day 3090 build
    assert every["n"] == 27 and every["max_abs_error"] == pytest.approx(0.3213, abs=1e-3)
    worst = max(result["rows"], key=lambda r: abs(r["error"]))
    assert worst["id"] == "rtx3080-10g-iq2xxs-plain" and "IQ2_XXS" in worst["outlier"] and not worst["comparable"]
    day_one = next(r for r in result["rows"] if r["id"] == "rtx3090-dayone-plain")
    assert "release-day" in day_one["outlier"] and not day_one["comparable"]
    skipped = {s["id"]: s["reason"] for s in result["skipped"]}
    assert "tensor split" in skipped["rtx5060ti-x2-tensor-plain"] and "fork" in skipped["v100-32g-1cat-awq-plain"]
    assert all(r["id"] not in skipped for r in result["rows"])


def test_plan_shows_the_public_check_for_a_card_with_rows():
    part = plan.public_check_part(profiles.load("rtx4060ti-16g"))
    assert [r["published"] for r in part["rows"]] == [17.8, 17.6] and part["summary"]["n"] == 18
    lines = plan._public_check_lines(part)
    assert lines[0].startswith("  checked against published measurements (GeForce RTX 4060 Ti 16GB")
    assert "published  17.6, predicted  17.5 (-1%)" in "\n".join(lines)
    assert "source: github.com/sudoingX/qwen38-mtp/blob/741eee740b/sweeps/rtx-4060-ti.md" in "\n".join(lines)
    assert max(len(x) for x in lines) <= 100
    assert plan.public_check_part(profiles.load("h200-x1")) is None  # no public H200 row


def test_a_row_with_an_unknown_link_is_refused_with_the_fix():
    with pytest.raises(public_speed.PublicSpeedError, match="link 'nvlink9'.*gpu_links.yaml"):
        public_speed.validate_rows([_good_row(gpu_count=2, split_mode="tensor", link="nvlink9")])


def test_tp_model_against_the_public_tensor_split_rows():
    """lab.predict.tp_model's -sm tensor prediction (pessimistic bound) on the three public two-card rows with a file
    size and a link: within 8 % (median 3.9 %); the optimistic bound (fixed cost split too) overshoots by up to 20 %."""
    from lab.predict import public_check

    result = public_check.tensor_check()
    got = {r["id"]: (round(r["predicted"], 1), round(r["error"], 3)) for r in result["rows"]}
    assert got == {"rtx5060ti-x2-tensor-plain": (36.9, -0.006), "rtx5060ti-x2-tensor-llamabench": (36.9, -0.039),
                   "rtxa5000-x2-tensor-plain": (55.8, 0.076)}
    assert result["skipped"] == [{"id": "p40-x2-tensor-plain", "reason": "file size not published"}]
    assert round(result["summary"]["median_abs_error"], 3) == 0.039
    assert round(result["summary"]["max_abs_error"], 3) == 0.076
    assert round(result["optimistic"]["max_abs_error"], 3) == 0.198


def test_mtp_model_against_the_public_draft_mtp_rows():
    """lab.predict.mtp_model (step = plain + n x (head pass + the architecture's verify ms), each row at its predicted
    plain speed and its own published acceptance) on the public draft-mtp rows of the budget cards: in sample median
    5.0 %, max 16.1 % over 20 rows (targets 10 % / 20 % met; the issue's before: 11.7 % / 36.0 % over 19 rows with
    the H200's step ratio carried to every card). Held out, one row left out of the fit: 5.5 % / 19.4 %; one card left
    out: 12.4 % / 38.7 % (the V100s and the 5060 Ti are alone in their architecture: another one's verify ms)."""
    result = public_check.mtp_check()
    got = {r["id"]: (r["n_max"], round(r["predicted"], 1), round(r["error"], 3)) for r in result["rows"]}
    assert got["v100-32g-b10358-mtp-n1"] == (1, 46.0, -0.011)
    assert got["v100-32g-b10358-mtp-n2"] == (2, 48.3, 0.005)
    assert got["v100-32g-b10358-mtp-n4"] == (4, 45.0, 0.019)
    assert got["v100-32g-b10358-mtp-n6"] == (6, 38.9, 0.146)  # n-max 6 counts now: the same formula at any n
    assert got["v100-sxm2-16g-x2-layer-mtp-n4"] == (4, 49.6, -0.161)  # the worst row: the pair verifies cheaper
    assert got["rtx3090-b10450-mtp-n2"] == (2, 63.3, -0.002)
    assert got["rtx4060ti-16g-xyzv2-mtp-n3"] == (3, 38.1, -0.048)
    assert got["rtx5060ti-16g-xyzv2-mtp-n4"] == (4, 54.8, -0.079)
    comp = result["comparable"]
    assert comp["n"] == 20 and round(comp["median_abs_error"], 3) == 0.05 and round(comp["max_abs_error"], 3) == 0.161
    by = {a: (s["n"], round(s["median_abs_error"], 3), round(s["max_abs_error"], 3)) for a, s in result["by_arch"].items()}
    assert by == {"volta": (8, 0.074, 0.161), "ampere": (3, 0.014, 0.02), "ada": (5, 0.048, 0.076),
                  "blackwell": (4, 0.054, 0.079)}
    t = result["targets"]
    assert t["met"] is True and t["misses"] == []
    held = result["held_out"]
    assert (round(held["row"]["median_abs_error"], 3), round(held["row"]["max_abs_error"], 3)) == (0.055, 0.194)
    assert (round(held["card"]["median_abs_error"], 3), round(held["card"]["max_abs_error"], 3)) == (0.124, 0.387)
    by_held = {a: tuple(round(s[k][m], 3) for k in ("row", "card") for m in ("median_abs_error", "max_abs_error"))
               for a, s in held["by_arch"].items()}
    assert by_held == {"volta": (0.083, 0.194, 0.155, 0.374), "ampere": (0.025, 0.028, 0.025, 0.028),
                       "ada": (0.052, 0.118, 0.054, 0.212), "blackwell": (0.07, 0.136, 0.232, 0.387)}
    # calibration.yaml mtp_step_model is what the fit gives on these rows + the H200's steps
    assert {a: round(v, 2) for a, v in result["refit"]["verify_ms"].items()} == result["params"]["verify_ms"] == {
        "volta": 8.66, "ampere": 6.03, "ada": 3.0, "hopper": 2.81, "blackwell": 1.66}
    # the outliers' MTP rows are shown, not counted
    assert not next(r for r in result["rows"] if r["id"] == "rtx3090-dayone-mtp-n2")["comparable"]
    assert {s["id"] for s in result["skipped"]} == {"v100-32g-b9190-mtp-n2", "rtx3090-club3090-mtp-q4km",
                                                    "rtx3090-club3090-mtp-udq4kxl-245w", "rtx4090-500w-q4km-mtp-n2"}


def test_mtp_step_model_head_pass_and_architecture():
    from lab.predict import mtp_model

    # one head pass reads the MTP block + the output matrix: 8.3 % of a plain token's bytes (Q4_K_M mix)
    assert round(mtp_model.head_fraction(), 4) == 0.0826
    # V100 at 33.62 tok/s (29.74 ms): head 0.0826 x (29.74 - 3.65, the per-token model's fixed ms) = 2.15 ms + Volta's
    # 8.66 ms per draft
    ratio, basis = mtp_model.step_over_plain(2, 33.62, "volta")
    plain_ms = 1000 / 33.62
    assert mtp_model.fixed_ms() == pytest.approx(3.65)
    assert basis == "volta" and ratio == pytest.approx(1 + 2 * (mtp_model.head_fraction() * (plain_ms - 3.65) + 8.66)
                                                       / plain_ms)
    assert round(ratio, 2) == 1.73
    # an architecture without rows takes the most expensive fitted one (Volta's): under- rather than over-rating
    assert mtp_model.step_over_plain(2, 33.62, "pascal") == (ratio, "volta (no pascal rows)")
    # the H200's measured steps are reproduced within 4 % (its plain 86.24 tok/s, Hopper's 2.81 ms)
    for p in mtp_model.h200_points():
        assert abs(mtp_model.predict(p["plain_tok_s"], p["n"], 0.0, "hopper")["tok_s"] / p["tok_s"] - 1) < 0.04


def test_acceptance_as_published_becomes_one_rate():
    from lab.predict import mtp_model

    by = {r.id: r for r in public_speed.load()}
    assert mtp_model.acceptance_rate(by["v100-32g-b10358-mtp-n1"]) == pytest.approx(0.88)          # "0.87-0.89"
    assert mtp_model.acceptance_rate(by["v100-sxm2-16g-x2-layer-mtp-n4"]) == 0.66  # "0.33-0.92 (sweep: 0.66)"
    assert mtp_model.acceptance_rate(by["rtx4090-b10665-dyn3-mtp-n2"]) == 0.80     # "0.73-0.87 (0.80)"
    assert mtp_model.acceptance_rate(by["rtx3090-club3090-mtp-q4km"]) == pytest.approx(216 / 249)
    assert mtp_model.acceptance_rate(by["v100-32g-x4-1cat-awq-tp4-natural-mtp4"]) is None  # tokens per step
    assert mtp_model.acceptance_rate(by["v100-32g-b9190-mtp-n2"]) is None
    # break-even at n-max 2 on a V100: a step costs 1.73 plain tokens, so a rate of 0.36 (accepted ÷ drafted)
    p = mtp_model.predict(33.62, 2, 0.75, "volta")
    assert p["break_even_rate"] == pytest.approx((p["step_over_plain"] - 1) / 2)
    assert round(p["break_even_rate"], 2) == 0.36


def test_rows_re_read_say_what_was_measured():
    """Re-read 2026-12-05: the 1Cat-vLLM #334 row is its vLLM log (35.1 / 36.4 tok/s on agent traffic with prefix-cache
    hits, "about 40" in words); the fork's TP2 row cites its RELEASE.md file, not a commit list; the Spadav_ 4090 rows
    are 4,096-token curl generations (depth: half of them), not probe.py's 400 tokens."""
    rows = {r.id: r for r in public_speed.load()}
    fork = rows["v100-32g-1cat-awq-mtp-n3"]
    assert fork.decode_tok_s == 36.4 and "35.1 and 36.4" in fork.method and "prefix cache hit rate" in fork.method
    assert "36.4" in fork.quote
    assert rows["v100-32g-x2-1cat-awq-tp2-plain"].source.endswith("/RELEASE.md") and "/commits/" not in \
        rows["v100-32g-x2-1cat-awq-tp2-plain"].source
    for rid in ("rtx4090-spadav-plain", "rtx4090-spadav-mtp-n2"):
        assert rows[rid].depth_tokens == 2048 and "4,096-token" in rows[rid].method
        assert not rows[rid].method.startswith("probe.py")
