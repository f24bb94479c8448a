"""The public decode-speed dataset (lab/data/public_speed.yaml) and the per-token model checked against it (pure)."""
import pytest

from lab.core import profiles
from lab.predict import plan, public_check, public_speed, roofline


def test_dataset_loads_with_sources_quotes_and_positive_speeds():
    rows = public_speed.load()
    assert len(rows) == 139 and len({r.id for r in rows}) == 139
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
    assert {"v100-32g", "v100-16g", "rtx-3090", "rtx-3090-ti", "rtx-4090", "rtx-4060-ti-16g", "rtx-5060-ti-16g",
            "tesla-p40", "rtx-2080-ti-22g", "radeon-ai-pro-r9700", "rx-7900-xtx", "rtx-5090-laptop", "rtx-3060-12g",
            "rtx-3080-ti-laptop", "rtx-pro-6000-blackwell", "instinct-mi210"} <= cards
    assert sum(r.speculative is not None for r in rows) == 61 and sum(r.speculative is None for r in rows) == 78
    # issue 42: AMD rows on each backend, Windows rows said so, rows kept apart from the fit
    assert {r.backend for r in rows} == {None, "rocm", "vulkan"}
    assert sum(r.os == "windows" for r in rows) == 16 and sum(r.heldout for r in rows) == 17


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
    assert m.fixed_ms_by_family == {"qwen35": pytest.approx(3.27), "dense": pytest.approx(3.575, abs=1e-3)}
    # Hopper's own fixed cost: the lab's H100 + H200 are a controlled pair (one file, one build, two bandwidths)
    assert m.extra_fixed_ms_by_arch == {"hopper": pytest.approx(4.22)} and m.fixed_for("qwen35", "hopper") == pytest.approx(7.49)
    f = m.fraction_by_arch
    # each AMD backend is its own calibration (public_speed.calibration_key): ROCm is the card's own, Vulkan apart
    assert set(f) == {"volta", "ampere", "ada", "blackwell", "hopper", "pascal", "rdna3", "rdna3+vulkan", "rdna4+vulkan"}
    assert f["volta"] == pytest.approx(0.6949, abs=1e-3) and f["ampere"] == pytest.approx(0.8065, abs=1e-3)
    assert f["ada"] == pytest.approx(0.9196, abs=1e-3) and f["blackwell"] == pytest.approx(0.9213, abs=1e-3)
    assert f["hopper"] == pytest.approx(0.9993, abs=1e-3) and f["pascal"] == pytest.approx(0.3517, abs=1e-3)
    assert f["rdna3"] == pytest.approx(0.671, abs=1e-3) and f["rdna3+vulkan"] == pytest.approx(0.5395, abs=1e-3)
    assert max(f.values()) <= 1.0
    # the V100 rows at 31K and 101K tokens are checked, not fitted (public_speed.DEEP_TOKENS); the P40's only rows
    # are -sm tensor splits, fitted through tp_model (public_speed.tensor_point)
    assert m.rows_by_arch["volta"] == ("v100-32g-b10358-plain", "v100-32g-b9190-plain", "v100-sxm2-16g-x2-layer-plain")
    assert m.rows_by_arch["pascal"] == ("p40-x2-tensor-plain", "p40-x2-tensor-udq4kxl-plain")
    assert m.rows_by_arch["hopper"] == ("h200-tg128-qwen35-hybrid-shape", "h100-tg-qwen35-hybrid-shape")
    assert "turing" not in f
    # the lab's own Hopper points (H200 91.85 and H100 88.47 tok/s: 0.70x the bandwidth, 0.96x the speed) fit Hopper's
    # own fixed cost (7.49 ms; fraction 1.00, the physical cap): the H200 +3.7 %, the H100 -4.2 % (with the shared
    # fixed cost alone they were +10 % / -10 %). The dense H200 point is exact (the dense fixed cost comes from it).
    # Bytes read per token: the file's tensors less token_embd (calibration.yaml token_embd_bytes)
    assert m.predict_tok_s(15138093056 - 715161600, 4800, "datasheet", "qwen35", "hopper") == pytest.approx(95.27, abs=0.01)
    assert m.predict_tok_s(15138093056 - 715161600, 3350, "datasheet", "qwen35", "hopper") == pytest.approx(84.76, abs=0.01)
    assert m.predict_tok_s(18436147118 - 437575680, 4800, "datasheet", "dense", "hopper") == pytest.approx(86.6, rel=1e-9)
    # a measured copy is read in datasheet terms through the H200's copy ÷ datasheet (4227 ÷ 4800)
    assert m.copy_fraction_of_datasheet == 4227 / 4800
    assert m.predict_tok_s(18436147118 - 437575680, 4227, "copy", "dense", "hopper") == pytest.approx(86.6, rel=1e-9)


def test_check_meets_the_targets_on_the_budget_cards():
    result = public_check.check()
    comp, every = result["comparable"], result["all"]
    assert comp["n"] == 19 and comp["median_abs_error"] == pytest.approx(0.01469, abs=1e-4)
    assert comp["max_abs_error"] == pytest.approx(0.04443, abs=1e-4)
    assert comp["median_abs_error"] <= public_check.TARGET_MEDIAN and comp["max_abs_error"] <= public_check.TARGET_MAX
    assert result["targets"]["met"] is True
    # honest about the rest: the worst predicted row is the RTX 3080 Ti Laptop (an outlier, kept apart too: its 115 W
    # part decodes at half the bandwidth the Ampere rows reach, on an unnamed build), the worst without an outlier
    # note the V100 at 101K tokens (the depth group, not fitted); then the 2-bit IQ2_XXS file, with its reason (its
    # token embedding is sized as Q4_K_M's, the lab models no IQ2_XXS mix), and the release-day 3090 build
    assert every["n"] == 53 and every["max_abs_error"] == pytest.approx(0.9701, abs=1e-3)
    worst = max(result["rows"], key=lambda r: abs(r["error"]))
    assert worst["id"] == "rtx3080ti-laptop-udq3kxl-16k-plain" and "115 W" in worst["outlier"]
    deep = max((r for r in result["rows"] if not r["outlier"]), key=lambda r: abs(r["error"]))
    assert deep["id"] == "v100-32g-upstream-d101k-plain" and deep["deep"] and not deep["comparable"]
    worst = max((r for r in result["rows"] if r["outlier"] and "IQ2" in (r["quant"] or "")), key=lambda r: abs(r["error"]))
    assert worst["id"] == "rtx3080-10g-iq2xxs-plain" and "IQ2_XXS" in worst["outlier"] and not worst["comparable"]
    day_one = next(r for r in result["rows"] if r["id"] == "rtx3090-dayone-plain")
    assert "release-day" in day_one["outlier"] and not day_one["comparable"]
    skipped = {s["id"]: s["reason"] for s in result["skipped"]}
    assert "tensor split" in skipped["rtx5060ti-x2-tensor-plain"] and "fork" in skipped["v100-32g-1cat-awq-plain"]
    assert all(r["id"] not in skipped for r in result["rows"])


def test_plan_shows_the_public_check_for_a_card_with_rows():
    part = plan.public_check_part(profiles.load("rtx4060ti-16g"))
    assert [r["published"] for r in part["rows"]] == [17.8, 17.6] and part["summary"]["n"] == 19
    lines = plan._public_check_lines(part)
    assert lines[0].startswith("  checked against published measurements (GeForce RTX 4060 Ti 16GB")
    assert "published  17.6, predicted  17.5 (-0%)" in "\n".join(lines)
    assert "source: github.com/sudoingX/qwen38-mtp/blob/741eee740b/sweeps/rtx-4060-ti.md" in "\n".join(lines)
    assert max(len(x) for x in lines) <= 100
    assert plan.public_check_part(profiles.load("h200-x1")) is None  # no public H200 row


def test_a_row_with_an_unknown_link_is_refused_with_the_fix():
    with pytest.raises(public_speed.PublicSpeedError, match="link 'nvlink9'.*gpu_links.yaml"):
        public_speed.validate_rows([_good_row(gpu_count=2, split_mode="tensor", link="nvlink9")])


def test_tp_model_against_the_public_tensor_split_rows():
    """lab.predict.tp_model's -sm tensor prediction (pessimistic bound) on the public two-card rows with a file size and
    a link: the 6 shallow budget-card rows within 8 % (median 1.0 %; the two P40 rows are fitted through it, the others
    are not); the optimistic bound (fixed cost split too) overshoots by up to 20 %. The 5060 Ti pair's depth sweep
    (4K-130K tokens) is over-predicted more the deeper it goes: attention's work at depth is not modelled."""
    from lab.predict import public_check

    result = public_check.tensor_check()
    got = {r["id"]: (round(r["predicted"], 1), round(r["error"], 3)) for r in result["rows"]}
    assert got == {"rtx5060ti-x2-tensor-plain": (37.2, 0.002), "rtx5060ti-x2-tensor-llamabench": (37.2, -0.031),
                   "rtx5060ti-x2-tensor-d4k-plain": (37.0, 0.022), "rtx5060ti-x2-tensor-d16k-plain": (36.7, 0.062),
                   "rtx5060ti-x2-tensor-d32k-plain": (36.2, 0.118), "rtx5060ti-x2-tensor-d65k-plain": (35.3, 0.228),
                   "rtx5060ti-x2-tensor-d130k-plain": (33.6, 0.416), "rtxa5000-x2-tensor-plain": (56.3, 0.085),
                   "p40-x2-tensor-plain": (11.8, 0.007), "p40-x2-tensor-udq4kxl-plain": (13.1, -0.007),
                   "rtx5090-x2-tensor-udq4km-95ef7fc-plain": (93.7, -0.128)}  # kept apart: never fitted
    # the P40 row has its file size (20.22 GB) and link now; two rows published neither a size nor a link
    assert result["skipped"] == [{"id": "r9700-x2-tensor-rocm-q8-plain", "reason": "file size not published"},
                                 {"id": "rtx5060ti-x2-tensor-windows-q4km-b10450-plain",
                                  "reason": "no link (lab/data/gpu_links.yaml id)"}]
    assert {r["id"] for r in result["rows"] if r["fitted"]} == {"p40-x2-tensor-plain", "p40-x2-tensor-udq4kxl-plain"}
    assert result["summary"]["n"] == 6 and round(result["summary"]["median_abs_error"], 3) == 0.015
    assert round(result["summary"]["max_abs_error"], 3) == 0.085
    assert round(result["optimistic"]["max_abs_error"], 3) == 0.195
    depth = [got[f"rtx5060ti-x2-tensor-d{k}-plain"][1] for k in ("4k", "16k", "32k", "65k", "130k")]
    assert depth == sorted(depth) and result["depth"]["n"] == 4


def test_mtp_model_against_the_public_draft_mtp_rows():
    """lab.predict.mtp_model (step = plain + n x (head pass + the architecture's verify ms), each row at its predicted
    plain speed and its own published acceptance) on the public draft-mtp rows of the budget cards: in sample median
    3.5 %, max 15.4 % over 21 rows (targets 10 % / 20 % met; the issue's before: 11.7 % / 36.0 % over 19 rows with
    the H200's step ratio carried to every card). Held out, one row left out of the fit: 4.8 % / 20.8 %; one card left
    out (verify ms only): 16.5 % / 52.9 % (a card alone in its architecture takes another's verify ms; the full
    leave-one-card-out, plain model refitted too, is lab.predict.public_validate). Rows at 8,192+ tokens are the
    depth group and rows with gated drafts (p-min > 0) are reported apart: neither is fitted."""
    result = public_check.mtp_check()
    got = {r["id"]: (r["n_max"], round(r["predicted"], 1), round(r["error"], 3)) for r in result["rows"]}
    assert got["v100-32g-b10358-mtp-n1"] == (1, 46.8, 0.005)
    assert got["v100-32g-b10358-mtp-n2"] == (2, 49.0, 0.018)
    assert got["v100-32g-b10358-mtp-n4"] == (4, 45.3, 0.027)
    assert got["v100-32g-b10358-mtp-n6"] == (6, 39.1, 0.152)  # n-max 6 counts now: the same formula at any n
    assert got["v100-sxm2-16g-x2-layer-mtp-n4"] == (4, 50.0, -0.154)  # the worst row: the pair verifies cheaper
    assert got["rtx3090-b10450-mtp-n2"] == (2, 63.2, -0.004)
    assert got["rtx4060ti-16g-xyzv2-mtp-n3"] == (3, 39.7, -0.007)
    assert got["rtx5060ti-16g-xyzv2-mtp-n4"] == (4, 53.8, -0.095)
    assert got["p40-x2-tensor-udq4kxl-mtp-n4"] == (4, 23.6, 0.0)  # Pascal's one ungated row fits its verify ms
    comp = result["comparable"]
    assert comp["n"] == 26 and round(comp["median_abs_error"], 3) == 0.022 and round(comp["max_abs_error"], 3) == 0.154
    by = {a: (s["n"], round(s["median_abs_error"], 3), round(s["max_abs_error"], 3)) for a, s in result["by_arch"].items()}
    assert by == {"volta": (7, 0.069, 0.154), "ampere": (3, 0.011, 0.018), "ada": (3, 0.005, 0.007),
                  "blackwell": (5, 0.042, 0.095), "pascal": (1, 0.0, 0.0), "rdna3": (3, 0.026, 0.034),
                  "rdna3+vulkan": (3, 0.036, 0.057), "rdna4+vulkan": (1, 0.0, 0.0)}
    t = result["targets"]
    assert t["met"] is True and t["misses"] == []
    held = result["held_out"]
    assert (round(held["row"]["median_abs_error"], 3), round(held["row"]["max_abs_error"], 3)) == (0.041, 0.268)
    assert (round(held["card"]["median_abs_error"], 3), round(held["card"]["max_abs_error"], 3)) == (0.274, 0.527)
    by_held = {a: tuple(round(s[k][m], 3) for k in ("row", "card") for m in ("median_abs_error", "max_abs_error"))
               for a, s in held["by_arch"].items()}
    assert by_held == {"volta": (0.081, 0.208, 0.165, 0.353), "ampere": (0.02, 0.026, 0.02, 0.026),
                       "ada": (0.009, 0.015, 0.009, 0.015), "blackwell": (0.047, 0.124, 0.39, 0.527),
                       "pascal": (0.165, 0.165, 0.165, 0.165), "rdna3": (0.04, 0.042, 0.32, 0.37),
                       "rdna3+vulkan": (0.054, 0.069, 0.477, 0.51), "rdna4+vulkan": (0.268, 0.268, 0.268, 0.268)}
    # calibration.yaml mtp_step_model is what the fit gives on these rows + the H200's steps
    assert {a: round(v, 2) for a, v in result["refit"]["verify_ms"].items()} == result["params"]["verify_ms"] == {
        "volta": 8.72, "ampere": 6.04, "ada": 1.93, "hopper": 3.13, "blackwell": 1.92, "pascal": 14.31, "rdna3": 5.71,
        "rdna3+vulkan": 1.29, "rdna4+vulkan": 3.48}
    # the outliers' MTP rows are shown, not counted
    assert not next(r for r in result["rows"] if r["id"] == "rtx3090-dayone-mtp-n2")["comparable"]
    assert {s["id"] for s in result["skipped"]} == {"v100-32g-b9190-mtp-n2", "rtx3090-club3090-mtp-q4km",
                                                    "rtx3090-club3090-mtp-udq4kxl-245w", "rtx4090-500w-q4km-mtp-n2"}
    # the V100's 31K-token MTP row is the depth group: predicted, not fitted
    deep = next(r for r in result["rows"] if r["id"] == "v100-32g-b10358-depth31k-mtp-n2")
    assert deep["deep"] and not deep["comparable"] and round(result["depth"]["max_abs_error"], 3) == 0.104


def test_gated_drafts_are_reported_apart_and_not_modelled():
    """--spec-draft-p-min > 0: the step model drafts n-max tokens every step (p-min 0), so the published gated rows are
    predicted as if ungated at their published acceptance and summarised apart, never fitted nor used as a card's
    acceptance. Their errors say the gate is not modelled: the 5060 Ti pair's 0.60 gate lost 35 % (71.3 -> 46.2)."""
    from lab.predict import mtp_model

    result = public_check.mtp_check()
    gated = {r["id"]: round(r["error"], 3) for r in result["rows"] if r["gated"]}
    assert gated == {"rtx5060ti-x2-tensor-mtp-n4-pmin060": 0.767, "p40-x2-tensor-mtp-n4-pmin075": 0.073,
                     "p40-x2-tensor-udq4kxl-mtp-n4-pmin075": 0.16}
    assert result["gated"]["n"] == 3 and round(result["gated"]["median_abs_error"], 3) == 0.16
    rows = public_speed.load()
    assert mtp_model.acceptance_for("tesla-p40", 4, "tensor", rows) == (0.68, ["p40-x2-tensor-udq4kxl-mtp-n4"])
    assert mtp_model.published_best_n("tesla-p40", "tensor", rows) is None  # one ungated n-max only


def test_mtp_step_model_head_pass_and_architecture():
    from lab.predict import mtp_model

    # one head pass reads the MTP block + the output matrix: 8.3 % of a plain token's bytes (Q4_K_M mix)
    assert round(mtp_model.head_fraction(), 4) == 0.0826
    # V100 at 33.62 tok/s (29.74 ms): head 0.0826 x (29.74 - 3.27, the per-token model's fixed ms) = 2.19 ms + Volta's
    # 8.72 ms per draft
    ratio, basis = mtp_model.step_over_plain(2, 33.62, "volta")
    plain_ms = 1000 / 33.62
    assert mtp_model.fixed_ms() == mtp_model.fixed_ms("volta") == pytest.approx(3.27)
    assert mtp_model.fixed_ms("hopper") == pytest.approx(7.49)  # Hopper's own (the H100 + H200 pair)
    assert basis == "volta" and ratio == pytest.approx(1 + 2 * (mtp_model.head_fraction() * (plain_ms - 3.27) + 8.72)
                                                       / plain_ms)
    assert round(ratio, 2) == 1.73
    # a refit's own fixed cost goes with its verify ms (public_validate's folds): the head pass is bytes, not fixed ms
    other, _ = mtp_model.step_over_plain(2, 33.62, "volta", {"verify_ms": {"volta": 8.72}, "fixed_ms": 5.0})
    assert other == pytest.approx(ratio - 2 * mtp_model.head_fraction() * 1.73 / plain_ms)
    by_arch = {"verify_ms": {"volta": 8.72}, "fixed_ms": {"default": 5.0, "hopper": 9.0}}  # a refit's, per architecture
    assert mtp_model.step_over_plain(2, 33.62, "volta", by_arch)[0] == pytest.approx(other)
    # an architecture without rows takes the most expensive fitted one (Pascal's, from the P40 pair): under- rather
    # than over-rating
    worst, basis = mtp_model.step_over_plain(2, 33.62, "turing")
    assert basis == "pascal (no turing rows)" and worst == mtp_model.step_over_plain(2, 33.62, "pascal")[0] > ratio
    # the H200's measured steps are reproduced within 4 % (its plain 86.24 tok/s, Hopper's 3.13 ms)
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
    # break-even at n-max 2 on a V100: a step costs 1.73 plain tokens, so a rate of 0.37 (accepted ÷ drafted)
    p = mtp_model.predict(33.62, 2, 0.75, "volta")
    assert p["break_even_rate"] == pytest.approx((p["step_over_plain"] - 1) / 2)
    assert round(p["break_even_rate"], 2) == 0.37


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


NEW_ROWS = {  # added or completed 2026-12-05 (lab/data/public_speed.yaml), each from the source it names
    "p40-x2-tensor-plain", "p40-x2-tensor-mtp-n4-pmin075", "p40-x2-tensor-udq4kxl-plain", "p40-x2-tensor-udq4kxl-mtp-n4",
    "p40-x2-tensor-udq4kxl-mtp-n4-pmin075", "rtx5060ti-x2-tensor-mtp-n4", "rtx5060ti-x2-tensor-mtp-n4-pmin060",
    "rtx5060ti-x2-tensor-d4k-plain", "rtx5060ti-x2-tensor-d16k-plain", "rtx5060ti-x2-tensor-d32k-plain",
    "rtx5060ti-x2-tensor-d65k-plain", "rtx5060ti-x2-tensor-d130k-plain", "rtx2080ti-22g-upstream-d66k-plain",
    "v100-32g-upstream-d101k-plain"}


def test_rows_added_carry_source_read_date_file_and_what_was_measured():
    rows = {r.id: r for r in public_speed.load()}
    assert {i for i, r in rows.items() if r.read and r.read < "2026-12-07"} == NEW_ROWS
    for rid in NEW_ROWS:
        r = rows[rid]
        assert r.read == "2026-12-05" and r.source.startswith("https://github.com/") and r.file_gb and r.file_gb_basis
        assert r.method and r.gpu_id and (r.split_mode != "tensor" or r.link)
        if not rid.endswith("-upstream-d66k-plain") and not rid.endswith("-upstream-d101k-plain"):
            assert f"{r.decode_tok_s:g}" in r.quote.replace("**", ""), rid
    # the P40 row is checkable now: the pre-re-upload UD-Q5_K_XL (20,218,178,624 B) and the link of two P40s without P2P
    p40 = rows["p40-x2-tensor-plain"]
    assert (p40.file_gb, p40.link, p40.decode_tok_s) == (20.22, "pcie3-x16", 11.7) and "20,218,178,624" in p40.file_gb_basis
    # the upstream runs publish two arms each (JSON summaries); the row is their mean, the quote one of them
    turing, volta = rows["rtx2080ti-22g-upstream-d66k-plain"], rows["v100-32g-upstream-d101k-plain"]
    assert turing.decode_tok_s == round((17.441482977956234 + 17.265475843447703) / 2, 2) and "17.44" in turing.quote
    assert volta.decode_tok_s == round((16.425765799853014 + 16.28912039078953) / 2, 2) and "16.42" in volta.quote
    assert (turing.depth_tokens, volta.depth_tokens) == (65_536 + 1_000 + 32, 100_000 + 1_000 + 32)


def test_depth_term_is_complete_and_rows_at_depth_are_checked_not_fitted():
    """The per-token model reads, at depth d, K and V of every full-attention layer (every 4th of the 64: 16 layers x 4
    KV heads x 256 x 2 at the row's KV type) and the fixed-size Gated DeltaNet state. Every public row at 8,192+
    tokens decodes slower than those bytes say, more so the deeper: attention's arithmetic over the cached tokens, a
    term the model does not have and no source gives for every card (the 5060 Ti pair's sweep implies ~0.09 µs per
    cached token beyond the bytes, the V100 0.11 at f16 and 0.20 at q8_0), so those rows are checked as their own
    group and kept out of the fit rather than dragging each card's bandwidth fraction down."""
    arch = public_speed._arch()
    assert [i for i in arch.kv_layers] == list(range(3, 64, 4))
    from lab.predict import kvcache

    assert [kvcache.kv_bytes_per_token(arch, t) for t in ("f16", "q8_0", "q4_0")] == [
        16 * 4 * 256 * 2 * 2, 16 * 4 * 256 * 2 * 34 // 32, 16 * 4 * 256 * 2 * 18 // 32]
    fitted = {p["id"] for p in public_speed.fit_points()}
    rows = public_speed.load()
    deep = [r for r in rows if public_speed.is_deep(r)]
    assert deep and not fitted & {r.id for r in deep}
    check, tensor = public_check.check(), public_check.tensor_check()
    errors = {x["id"]: x["error"] for x in check["rows"] + tensor["rows"] if x["deep"]}
    assert len(errors) == 7 and min(errors.values()) > 0  # every one over-predicted
    assert (round(check["depth"]["median_abs_error"], 3), round(check["depth"]["max_abs_error"], 3)) == (0.102, 0.504)


def test_validate_leaves_each_card_architecture_and_backend_out_with_the_lab_s_own_fit():
    """python -m lab predict --validate (lab.predict.public_validate): every fold refits with roofline.fit_model and
    mtp_model.fit on the rows left: each card, each architecture (both AMD backends), each llama.cpp backend (cuda,
    rocm, vulkan: every CUDA row out leaves the AMD rows and the lab's Hopper points) left out. In sample the plain target (10 % /
    20 %) holds; held out, the issue's target (LOCO median <= 8 %, max <= 25 %) is met by no group: a card alone in its
    architecture (the P40, the V100s, the XTX, the 5060 Ti for MTP) falls back on other architectures' terms, which
    do not carry (P40 +87 %). Rows kept apart (never fitted) and Windows rows (not modelled) are reported apart."""
    from lab.predict import public_validate

    result = public_validate.validate()
    got = {g: tuple((s[f]["n"], round(s[f]["median_abs_error"], 3), round(s[f]["max_abs_error"], 3))
                    for f in ("in_sample", "loco", "loao", "lobo")) for g, s in result["groups"].items()}
    assert got == {"plain": ((19, 0.015, 0.044), (19, 0.054, 0.428), (19, 0.222, 0.428), (19, 0.236, 0.428)),
                   "mtp": ((26, 0.022, 0.154), (26, 0.24, 0.769), (26, 0.356, 0.769), (26, 0.306, 0.944)),
                   "tensor": ((6, 0.015, 0.085), (6, 0.066, 0.861), (6, 0.23, 0.861), (6, 0.248, 0.718)),
                   "depth": ((8, 0.111, 0.504), (8, 0.128, 0.47), (8, 0.101, 0.456), (8, 0.111, 0.39)),
                   "p-min": ((3, 0.16, 0.767), (3, 0.912, 1.053), (3, 0.912, 1.053), (3, 1.063, 1.255)),
                   "windows": ((12, 0.131, 0.315), (12, 0.094, 0.49), (12, 0.213, 0.551), (12, 0.197, 0.49)),
                   "kept apart": ((13, 0.1, 0.316), (13, 0.118, 0.354), (13, 0.242, 0.742), (13, 0.169, 0.523))}
    # in sample equals public_check's (the lab's published model), and its plain targets still hold
    comp = public_check.check()["comparable"]
    assert result["groups"]["plain"]["in_sample"] == comp and public_check.check()["targets"]["met"]
    assert result["groups"]["mtp"]["in_sample"] == public_check.mtp_check()["comparable"]
    assert result["groups"]["tensor"]["in_sample"] == public_check.tensor_check()["summary"]
    t = result["targets"]
    assert t["by_group"] == {"plain": False, "mtp": False, "tensor": False} and t["met"] is False
    assert t["misses"][:3] == ["p40-x2-tensor-plain", "p40-x2-tensor-udq4kxl-plain", "p40-x2-tensor-udq4kxl-mtp-n4"]
    # the rows kept apart judge the fit on rows it never saw: issue 42's target (median <= 10 %, max <= 30 %) NOT met
    # (the XTX's launch-week MTP row +32 %); 4 of the 17 carry an outlier note, read from their sources (the 5090
    # Laptop's release-night pair, the PRO 6000's b10335 draft path, the 3080 Ti Laptop at 115 W)
    kept = t["kept_apart"]
    assert (kept["n"], round(kept["median_abs_error"], 3), round(kept["max_abs_error"], 3), kept["met"]) == (
        13, 0.1, 0.316, False)
    by_card = {c: round(s["loco"]["max_abs_error"], 3) for c, s in result["by_card"].items()}
    assert by_card["tesla-p40"] == 0.861 and by_card["v100-16g/v100-32g"] == 0.361 and by_card["rtx-3090"] == 0.034
    assert by_card["rx-7900-xtx"] == 0.433
    p40 = next(x for x in result["rows"] if x["id"] == "p40-x2-tensor-plain")
    assert "tesla-p40 left out: fraction FALLBACK 0.70" in p40["loco_fold"] and p40["loco"] == p40["loao"]
    cuda = next(x for x in result["rows"] if x["id"] == "rtx3090-b10450-plain")
    assert cuda["lobo_fold"].startswith("cuda left out: fraction FALLBACK") and cuda["lobo"] is not None
    # a fold is the lab's fit on fewer rows: with nothing left out it is the published model
    model, params = public_validate.refit(public_speed.load())
    assert model.fraction_by_arch == roofline.per_token_model().fraction_by_arch
    assert {a: round(v, 2) for a, v in params["verify_ms"].items()} == public_check.mtp_check()["params"]["verify_ms"]
