"""lab.predict.speculative_speed: speculative decoding's speed = tokens per step ÷ step cost, checked on measured
numbers — the lab's H200 (2026-12-01, Qwen3.8-27B-shaped stand-in: llama-bench tg128 90.1 tok/s; draft-mtp at
--spec-draft-n-max 2 and zero acceptance 55 tok/s; llama-bench pp1/2/3/4/6/8 = 78/145/192/219/274/306 tok/s) and a
V100 owner's published sweep (sudoingX/qwen38-mtp sweeps/workstation.md, Tesla V100 32GB: 33.6 tok/s plain, 48.1 tok/s
at n-max 2 with acceptance 0.75 from the server log)."""
import pytest

from lab.experiments import speculative
from lab.predict import speculative_speed as ss

H200_PLAIN = 90.1
H200_STEP = {2: 1000 / 55}  # zero acceptance: one token per step
H200_PP = {1: 78, 2: 145, 3: 192, 4: 219, 6: 274, 8: 306}
V100_PLAIN, V100_MTP2, V100_RATE = 33.6, 48.1, 0.75


def test_expected_tokens_and_its_inverse():
    assert ss.expected_tokens(0.75, 2) == pytest.approx(2.3125)       # 1 + 0.75 + 0.5625
    assert ss.expected_tokens(0.0, 4) == 1 and ss.expected_tokens(1.0, 4) == 5
    assert ss.tokens_from_rate(0.75, 2) == 2.5                        # accepted ÷ drafted, 2 drafts a step
    assert ss.acceptance_for(2.3125, 2) == pytest.approx(0.75, abs=1e-9)
    assert ss.acceptance_for(1.0, 3) == 0.0 and ss.acceptance_for(3.5, 2) is None
    with pytest.raises(ValueError, match="acceptance must be in"):
        ss.expected_tokens(1.2, 2)


def test_h200_step_costs_from_the_measured_row_and_the_verification_batches():
    assert ss.verify_ms(3, H200_PP) == pytest.approx(15.625)          # 3 tokens ÷ 192 tok/s
    assert ss.verify_ms(5, H200_PP) == pytest.approx((4000 / 219 + 6000 / 274) / 2)  # between pp4 and pp6
    head = ss.head_ms(H200_STEP, H200_PP)
    assert head == pytest.approx((1000 / 55 - 15.625) / 2) == pytest.approx(1.278, abs=1e-3)  # one MTP head pass
    assert ss.step_cost_ms(2, H200_STEP, H200_PP) == (pytest.approx(18.18, abs=0.01), "measured")
    one, how = ss.step_cost_ms(1, H200_STEP, H200_PP)
    assert how == "modelled" and one == pytest.approx(2000 / 145 + head)  # 13.79 + 1.28 = 15.07 ms
    four, _ = ss.step_cost_ms(4, H200_STEP, H200_PP)
    assert four == pytest.approx(25.19, abs=0.01)
    # break-even at n = 2: a step costs 1.64 plain tokens, so 1.64 tokens per step are needed
    be = ss.break_even(1000 / 55, 1000 / H200_PLAIN, 2)
    assert be["tokens_per_step"] == pytest.approx(1.638, abs=1e-3)
    assert be["rate"] == pytest.approx(0.319, abs=1e-3) and be["acceptance"] == pytest.approx(0.442, abs=1e-3)
    rows = ss.table(H200_PLAIN, H200_STEP, H200_PP)
    assert [r["step_from"] for r in rows] == ["modelled", "measured", "modelled", "modelled"]
    assert rows[1]["tok_s_at_a0.9"] == pytest.approx(1000 * ss.expected_tokens(0.9, 2) / (1000 / 55))  # 149 tok/s


def test_the_v100_owner_s_published_mtp_speed_is_reproduced():
    """lab.predict.mtp_model's Volta step (plain + 2 x (head pass 2.15 ms + Volta's verify 8.76 ms)) on the V100's
    plain 33.6 tok/s = 1.73 plain tokens, with its published acceptance rate 0.75 (2.5 tokens per step): 48.5 tok/s
    predicted against 48.1 published (+0.8 %). The H200's step ratio carried over (18.2 ms ÷ 11.1 ms = 1.64, the
    model this replaced) gave 51.3 (+6.6 %): the V100's own numbers give its step as 1.75 plain tokens."""
    from lab.predict import mtp_model

    p = mtp_model.predict(V100_PLAIN, 2, V100_RATE, "volta")
    assert round(p["step_over_plain"], 2) == 1.73 and p["tok_s"] == pytest.approx(48.5, abs=0.1)
    assert abs(p["tok_s"] / V100_MTP2 - 1) < 0.02
    h200_carried = (1000 / 55) / (1000 / H200_PLAIN) * 1000 / V100_PLAIN
    assert ss.speed_tok_s(ss.tokens_from_rate(V100_RATE, 2), h200_carried) == pytest.approx(51.3, abs=0.1)
    v100_own_step = 1000 * ss.tokens_from_rate(V100_RATE, 2) / V100_MTP2
    assert v100_own_step / (1000 / V100_PLAIN) == pytest.approx(1.746, abs=1e-3)
    assert ss.break_even(v100_own_step, 1000 / V100_PLAIN, 2)["rate"] == pytest.approx(0.373, abs=1e-3)


def test_speculative_rows_give_the_step_cost_and_the_model():
    row = {"kind": "mtp", "n_max": 2, "status": "ok", "stream_decode_tok_s": 55.0, "decoded_tokens": 381, "draft_n": 762,
           "draft_n_accepted": 0, "acceptance_rate": 0.0}
    step = speculative.step_cost(row)
    assert step["ms_per_step"] == pytest.approx(18.18, abs=0.01) and step["tokens_per_step"] == 1.0
    assert step["drafts_per_step"] == 2.0
    accepted = speculative.step_cost(dict(row, stream_decode_tok_s=100.0, draft_n_accepted=127))  # 254 steps, 1.5 tokens each
    assert accepted["tokens_per_step"] == pytest.approx(1.5) and accepted["ms_per_step"] == pytest.approx(15.0)
    model = speculative.step_model({"baseline_decode_tok_s": H200_PLAIN, "mtp_steps": [step]}, {"tok_s": H200_PP})
    assert model["why"] is None and [r["n_max"] for r in model["rows"]] == [1, 2, 3, 4]
    assert speculative.step_model({"baseline_decode_tok_s": None, "mtp_steps": []}, None)["rows"] == []


def test_mtp_variants_come_first_at_each_n_max():
    v = speculative.variants("d.gguf", synth_lengths=(2.0,), mtp_n_max=speculative.MTP_N_MAX)
    assert [x["kind"] for x in v] == ["none", "mtp", "mtp", "mtp", "mtp", "draft", "synthetic", "ngram"]
    assert [x["args"][-1] for x in v if x["kind"] == "mtp"] == ["1", "2", "3", "4"]
    assert [x["kind"] for x in speculative.variants(None, synth_lengths=())] == ["none", "mtp", "ngram"]


def test_main_measures_the_profile_and_writes_its_record_into_a_new_run_folder(tmp_path, monkeypatch, capsys):
    # python -m lab.experiments.speculative (lab/device/run_spec.sh): the profile named, the stand-in when it names
    # model_synth, every variant within the budget, records/06_speculative.json of a new run folder
    import json

    from lab.core import evidence
    from lab.model import standin

    run, seen = tmp_path / "run", {}
    monkeypatch.setattr(evidence, "new_run_dir", lambda name, out_root=None: seen.setdefault("name", name) and run)
    monkeypatch.setattr(standin, "for_run", lambda *a, **k: None)
    monkeypatch.setattr(speculative, "draft_for", lambda profile: (None, "no draft here"))

    def measure(profile, draft, log_dir, **kw):
        seen.update(kw, profile=profile.name, log_dir=log_dir)
        return speculative.summarise([{"variant": "every variant", "kind": "none", "status": "skip", "error": "test"}],
                                     profile, draft)

    monkeypatch.setattr(speculative, "measure", measure)
    assert speculative.main(["--profile", "cpu-default", "--budget-s", "7"]) == 0
    assert seen["name"] == "cpu-default" and seen["profile"] == "cpu-default"
    assert seen["budget_s"] == 7 and seen["requests"] == 3 and seen["log_dir"] == run / "logs" / "speculative"
    record = json.loads((run / "records" / "06_speculative.json").read_text())
    assert record["record"] == "06_speculative" and record["speculative"]["rows"][0]["status"] == "skip"
    assert f"run folder: {run}" in capsys.readouterr().out
