"""`lab predict` (lab.predict.card_speed, lab.predict.predict_cli): a card as people write it resolves to the GPU
table's entry, the numbers are `lab plan`'s for every profile's card (plain, -sm tensor, MTP), a TSV's good and bad rows
come back in order with why_not, and an unknown card or a bad file is a clear error, never a traceback. In-process."""
import json

import pytest

from lab.core import profiles
from lab.core.paths import ROOT
from lab.model import models, weights
from lab.predict import card_speed, plan, predict_cli, roofline
from lab.predict.card_speed import Ask

GPU_PROFILES = sorted(p.stem for p in (ROOT / "params").glob("*.yaml") if profiles.load(p).gpu_count > 0)


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = predict_cli.main(argv)
    except SystemExit as exc:  # argparse: --help, or a flag's value of the wrong form (exit 2)
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def ask_for(prof) -> tuple[Ask, bool]:
    """The ask that describes a profile's box with the flags alone (no --profile), and whether its weights were read
    from a GGUF on this machine (then the MTP block and embedding come from the header, not the quant's mix)."""
    parts = weights.profile_weight_parts(prof, models.arch_for(prof))
    spec = roofline.gpu_spec_for(prof.gpu_name_pattern or prof.name)
    vllm = prof.engine == "vllm"
    return Ask(gpu=spec["id"], gpus=prof.gpu_count, engine="vllm" if vllm else None, gpu_util=prof.gpu_memory_utilization,
               split=("tensor" if vllm and prof.tensor_parallel_size > 1 else None) if vllm else
               prof.split_mode or ("layer" if prof.gpu_count > 1 else None),
               weights_gb=parts["file_bytes"] / 1e9, quant=prof.model_quant, kv=prof.kv_cache_dtype,
               context=prof.context_tokens, slots=prof.parallel_slots,
               depth=prof.bench_prompt_tokens + prof.bench_output_tokens // 2), parts["basis"].startswith("file:")


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_predict_gives_lab_plans_speed_and_fit_for_every_gpu_profile(name, capsys):
    prof = profiles.load(name)
    planned = plan.plan(prof)
    ask, on_disk = ask_for(prof)
    got = card_speed.predict(ask)
    assert got["plain_tok_s"] == pytest.approx(planned["predicted_decode_tok_s"], rel=1e-3 if on_disk else 1e-9)
    assert got["memory"]["fits"] == planned["fits"]
    assert (got["why_not"] is None) == planned["fits"] and got["predicted_tok_s"] == (got["plain_tok_s"] if planned["fits"] else None)
    assert got["ceiling_tok_s"] == pytest.approx(planned["decode_ceiling_tok_s"], rel=1e-3 if on_disk else 1e-9)
    # --profile fills every input from the profile itself: the same number to the printed precision
    rc, out, _ = run(["--profile", name, "--json"], capsys)
    (row,) = json.loads(out)
    assert row["predicted_tok_s"] == round(planned["predicted_decode_tok_s"], 3) and rc == 0


def test_tensor_split_and_mtp_are_lab_plans_routes():
    """The V100 pair's -sm tensor route (tp_model over NVLink) and the one card's MTP route, as `lab plan` prints them."""
    pair = profiles.load("v100-32g-x2-nvlink")
    routes = {r["id"]: r for r in plan.plan(pair)["routes"]["routes"]}
    ask, on_disk = ask_for(pair)
    ask.split, ask.link, ask.depth = "tensor", "v100-sxm2-nvlink2", card_speed.default_depth()
    got = card_speed.predict(ask)
    assert got["plain_tok_s"] == pytest.approx(routes["llama-tensor"]["tok_s"], rel=1e-3 if on_disk else 1e-9)
    assert got["ceiling_tok_s"] == pytest.approx(2 * got["model"]["bandwidth_gb_s_per_card"] / got["model"]["bytes_per_token_gb"])
    one = profiles.load("v100-32g-x1")
    mtp = {r["id"]: r for r in plan.plan(one)["routes"]["routes"]}["llama-one-mtp"]
    ask, on_disk = ask_for(one)
    ask.spec = "draft-mtp"
    got = card_speed.predict(ask)
    assert got["predicted_tok_s"] == pytest.approx(mtp["tok_s"], rel=1e-3 if on_disk else 1e-9)
    assert got["model"]["mtp"]["n_max"] == mtp["mtp_n_max"] and "same card" in got["model"]["mtp"]["acceptance_from"]


@pytest.mark.parametrize("text,card_id", [
    ("Tesla P40", "tesla-p40"), ("P40", "tesla-p40"), ("3090", "rtx-3090"), ("RTX 3090", "rtx-3090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("3090 Ti", "rtx-3090-ti"), ("rtx3090ti", "rtx-3090-ti"),
    ("V100 32GB", "v100-32g"), ("v100-sxm2-32gb", "v100-32g"), ("Tesla V100-PCIE-16GB", "v100-16g"),
    ("4060ti", "rtx-4060-ti-16g"), ("RTX 5060 Ti 16GB", "rtx-5060-ti-16g"), ("h200", "h200"), ("A5000", "rtx-a5000")])
def test_names_resolve_as_people_write_them(text, card_id):
    assert card_speed.resolve_card(text)["id"] == card_id


def test_every_card_resolves_to_itself_and_its_profile_calibration():
    for g in roofline.gpu_specs():
        assert card_speed.resolve_card(g["id"])["id"] == card_speed.resolve_card(g["name"])["id"] == g["id"]
        # the built profile names the card by its table name: lab plan's lookup must find the same card
        assert roofline.gpu_spec_for(g["name"])["id"] == g["id"]


def test_unknown_cards_say_did_you_mean_and_how_to_list():
    with pytest.raises(card_speed.UnknownCard) as exc:
        card_speed.resolve_card("Quadro P4000")  # holds "P40" inside a longer number: not a P40
    assert "unknown card 'Quadro P4000'" in str(exc.value) and "did you mean 'Tesla P40'" in str(exc.value)
    assert "--list-gpus" in str(exc.value)
    with pytest.raises(card_speed.UnknownCard, match=r"did you mean 'GeForce RTX 4060 Ti 16GB'"):
        card_speed.resolve_card("4060")


def test_unknown_card_on_the_command_line_is_one_clear_error(capsys):
    rc, out, err = run(["--gpu", "A100"], capsys)
    assert rc == 1 and out == "" and err.startswith("error: unknown card 'A100'") and "--list-gpus" in err
    rc, out, _ = run(["--gpu", "A100", "--json"], capsys)
    (row,) = json.loads(out)
    assert rc == 1 and row["predicted_tok_s"] is None and row["why_not"].startswith("unknown card 'A100'")
    rc, _, err = run([], capsys)
    assert rc == 2 and "--gpu" in err


def test_a_p40_pair_is_fitted_on_its_published_rows_and_says_what_was_not_modelled():
    """The Tesla P40's two published -sm tensor rows (UD-Q5_K_XL 11.7, UD-Q4_K_XL 13.2 tok/s) fit Pascal's fraction
    through tp_model (0.35 of 346 GB/s) and its one ungated MTP row Pascal's verify ms: no fallback left on the P40."""
    got = card_speed.predict(Ask(gpu="Tesla P40", gpus=2, split="tensor", weights_gb=17.9, kv="q4_0", context=131072,
                                 depth=32768, n_max=3, p_min=0.75, acceptance=0.7))
    m = got["model"]
    assert got["why_not"] is None and got["predicted_tok_s"] > got["plain_tok_s"] > 0
    assert m["fraction_from"] == "pascal: fitted on its own 2 row(s) (p40-x2-tensor-plain, p40-x2-tensor-udq4kxl-plain)"
    assert m["bandwidth_fraction"] == roofline.per_token_model().fraction_by_arch["pascal"] == pytest.approx(0.352, abs=1e-3)
    assert m["mtp"]["verify_ms_from"].startswith("pascal (") and m["mtp"]["acceptance_rate"] == 0.7
    assert m["link"] == "pcie3-x16" and got["ceiling_tok_s"] == pytest.approx(2 * 346 / m["bytes_per_token_gb"])
    assert m["weights_file_gb"] == 17.9 and "stated" in m["weights_basis"]
    notes = " | ".join(got["notes"])
    for said in ("p_min 0.75 is not modelled", "3 published gated rows", "depth 32,768: modelled only as the KV",
                 "over all 7 predicted rows at 8,192+ tokens", "refuses it", "b10453 (3cb7ffb1a) (p40-x2-tensor-plain",
                 "link not given"):
        assert said in notes, said
    # the owners' set-up (UD-Q5_K_XL, 20.22 GB, 2 x P40, -sm tensor) is the published 11.7 within 1 %, not +110 %
    owners = card_speed.predict(Ask(gpu="P40", gpus=2, split="tensor", weights_gb=20.22, quant="Q5_K_M", kv="q4_0",
                                    context=131072, depth=1, link="pcie3-x16"))
    assert owners["predicted_tok_s"] == pytest.approx(11.7, rel=0.02)


def test_a_turing_card_says_its_calibration_is_a_fallback_and_what_its_owners_measured():
    """The RTX 2080 Ti's only published row is at 66K tokens (the depth group: not fitted), so Turing has no fitted
    fraction: the median of the fitted architectures stands in, labelled FALLBACK, beside what the card measured."""
    got = card_speed.predict(Ask(gpu="2080 Ti 22GB", weights_gb=20.88, quant="Q5_K_M", kv="q8_0", context=67584,
                                 depth=66568, spec="draft-mtp", n_max=2, acceptance=0.7))
    m = got["model"]
    assert got["card_id"] == "rtx-2080-ti-22g" and got["why_not"] is None and got["memory"]["fits"]
    assert m["fraction_from"].startswith("FALLBACK: no turing rows")
    assert m["bandwidth_fraction"] == roofline.per_token_model().default_fraction
    assert m["mtp"]["verify_ms_from"].startswith("FALLBACK: pascal (no turing rows)")
    notes = " | ".join(got["notes"])
    assert "rtx2080ti-22g-upstream-d66k-plain: 1 x, -sm none, unsloth UD-Q5_K_XL, llama.cpp: 17.35 tok/s" in notes
    assert "on this card rtx2080ti-22g-upstream-d66k-plain at 66,568 tokens: predicted 18.2 vs published 17.35" in notes
    assert card_speed.predict(Ask(gpu="2080 Ti"))["why_not"].startswith("does not fit")  # 11 GB


def test_a_tsv_of_good_and_bad_rows_comes_back_in_order(tmp_path, capsys):
    header = "gpu\tgpus\tsplit\tengine\tweights_gb\tkv\tcontext\tdepth\tspec\tn_max\tp_min\tacceptance\tcomment"
    rows = ["V100 32GB" + "\t" * 12,
            "3090\t\t\t\t\tf16\t262144\t\t\t\t\t\ttoo long",
            "Tesla P40\t2\ttensor\tllama.cpp\t17.9\tq4_0\t131072\t32768\tdraft-mtp\t3\t0.75\t0.7\t",
            "P40\ttwo\t\t\t\t\t\t\t\t\t\t\t",
            "",
            "Quadro P4000\t\t\t\t\t\t\t\t\t\t\t\t"]
    f = tmp_path / "mine.tsv"
    f.write_text("\n".join([header] + rows) + "\n")
    rc, out, _ = run(["--rows", str(f), "--json"], capsys)
    got = json.loads(out)
    assert rc == 1 and [r["row"] for r in got] == [1, 2, 3, 4, 5]
    assert {"predicted_tok_s", "why_not", "route", "ceiling_tok_s", "model", "memory", "notes"} <= set(got[0])
    v100 = card_speed.predict(Ask(gpu="V100 32GB"))["predicted_tok_s"]
    assert got[0]["why_not"] is None and got[0]["predicted_tok_s"] == round(v100, 3) and got[0]["card_id"] == "v100-32g"
    assert got[1]["predicted_tok_s"] is None and got[1]["why_not"].startswith("does not fit: weights")
    assert "> 24.00 GiB (262,144 tokens over 1 slot(s), f16 KV" in got[1]["why_not"]
    assert got[2]["why_not"] is None and got[2]["predicted_tok_s"] > 0 and "-sm tensor" in got[2]["route"]
    assert got[3]["predicted_tok_s"] is None and got[3]["why_not"] == ("bad cell(s) on line 5: column gpus: 'two' is "
                                                                       "not a whole number")
    assert got[4]["predicted_tok_s"] is None and got[4]["why_not"].startswith("unknown card 'Quadro P4000'")
    rc, text, _ = run(["--rows", str(f)], capsys)
    assert rc == 1 and all(len(line) <= 100 for line in text.splitlines()) and "why not: does not fit" in text


def test_a_default_the_user_did_not_choose_never_turns_a_set_up_into_does_not_fit():
    """Issue 42: a 3090 at 262,144 tokens with the KV type not given is answered at q8_0, the largest llama.cpp type
    that fits (said in a note); a 10 GB 3080 with a 9.5 GB file and no context at the longest context that fits; with
    the KV type or the context stated, a set-up that does not fit still says so."""
    kv = card_speed.predict(Ask(gpu="3090", context=262144))
    assert kv["predicted_tok_s"] and kv["kv"] == "q8_0" and kv["notes"][0].startswith("KV type not given: f16 does not fit")
    # q8_0 fits only at the low end of what owners' loaded cards show llama.cpp's buffers take: tight, said so
    assert kv["memory"]["tight"].startswith("tight: 24.61 GiB per card with the lab's 1.23 GiB")
    assert "owners' loaded cards imply 0.35-1.71 GiB" in kv["memory"]["tight"] and kv["memory"]["tight"] in kv["notes"]
    ctx = card_speed.predict(Ask(gpu="3080", weights_gb=9.5, quant="UD-IQ2_XXS", kv="f16"))
    assert ctx["predicted_tok_s"] and ctx["context"] < 32768 and ctx["notes"][0].startswith("context not given")
    assert card_speed.predict(Ask(gpu="3090", context=262144, kv="f16"))["why_not"].startswith("does not fit")


def test_amd_laptop_hopper_and_the_quants_llama_cpp_makes():
    """Issue 42's cards and quants: an AMD card on its own backend (ROCm) and on Vulkan (calibrated apart), a laptop
    part as its own chip, H100 PCIe and SXM, IQ3_XXS and the UD mixes accepted and sized, Windows said not modelled."""
    vulkan = card_speed.predict(Ask(gpu="R9700", backend="vulkan", weights_gb=17.92, quant="UD-Q4_K_XL", kv="q4_0",
                                    context=262144))
    assert vulkan["card_id"] == "radeon-ai-pro-r9700" and vulkan["model"]["calibration_key"] == "rdna4+vulkan"
    assert vulkan["predicted_tok_s"] == pytest.approx(22.1, abs=0.1)  # published 27.0 (kept apart): -18 %
    rocm = card_speed.predict(Ask(gpu="R9700"))
    assert rocm["model"]["calibration_key"] == "rdna4" and rocm["model"]["fraction_from"].startswith("FALLBACK")
    assert card_speed.predict(Ask(gpu="R9700", backend="cuda"))["why_not"].startswith("bad value: backend 'cuda'")
    # a laptop part the table does not hold is never resolved as the desktop card of that number
    assert "a laptop part is its own chip, not the desktop GeForce RTX 4090" in card_speed.predict(
        Ask(gpu="RTX 4090 Laptop"))["why_not"]
    laptop = card_speed.predict(Ask(gpu="RTX 5090 Laptop", context=131072, kv="q4_0"))
    assert laptop["card_id"] == "rtx-5090-laptop" and laptop["model"]["bandwidth_gb_s_per_card"] == 896
    assert [card_speed.resolve_card(n)["id"] for n in ("H100 PCIe", "H100 SXM", "H100", "MI50", "3060", "3070",
                                                       "3080 Ti", "RTX PRO 6000")] == [
        "h100-pcie", "h100-sxm", "h100-sxm", "instinct-mi50-32g", "rtx-3060-12g", "rtx-3070", "rtx-3080-ti",
        "rtx-pro-6000-blackwell"]
    iq3 = card_speed.predict(Ask(gpu="3090", quant="IQ3_XXS"))
    assert iq3["predicted_tok_s"] and iq3["model"]["weights_file_gb"] == pytest.approx(10.29, abs=0.01)
    ud = card_speed.predict(Ask(gpu="3090", quant="UD-Q4_K_XL"))
    assert ud["model"]["weights_file_gb"] == pytest.approx(17.56, abs=0.01)
    win = card_speed.predict(Ask(gpu="4090", os="windows"))
    assert win["predicted_tok_s"] == card_speed.predict(Ask(gpu="4090"))["predicted_tok_s"]
    assert any(n.startswith("os windows is not modelled") and "rtx4090-b10665-dyn3-plain" in n for n in win["notes"])


def test_a_missing_file_or_a_bad_header_is_a_clear_error(tmp_path, capsys):
    rc, out, err = run(["--rows", str(tmp_path / "none.tsv")], capsys)
    assert rc == 1 and out == "" and "no such file" in err and "Traceback" not in err
    bad = tmp_path / "bad.tsv"
    bad.write_text("card\tgpus\nP40\t2\n")
    rc, out, err = run(["--rows", str(bad)], capsys)
    assert rc == 1 and out == "" and "bad header" in err and "no gpu column" in err
    rc, _, err = run(["--gpu", "P40", "--gpus", "two"], capsys)
    assert rc == 2 and "--gpus" in err


def test_validate_prints_held_out_errors_beside_in_sample(capsys):
    """--validate: leave-one-card-out and leave-one-architecture-out, each fold refitted with the lab's own fit
    functions (lab.predict.public_validate; its values: tests/unit/test_public_speed.py)."""
    rc, out, _ = run(["--validate"], capsys)
    lines = out.splitlines()
    assert rc == 0 and lines[0].split()[:3] == ["Group", "n", "in"] and all(len(x) <= 100 for x in lines)
    table = "\n".join(lines[:8])
    table = "\n".join(lines[:10])
    for row in ("plain                      19   1.5% /  4.4%   5.4% / 42.8%   22.2% / 42.8%   23.6% / 42.8%",
                "tensor split               6    1.5% /  8.5%   6.6% / 86.1%   23.0% / 86.1%   24.8% / 71.8%",
                "kept apart (never fitted)  13  10.0% / 31.6%  11.8% / 35.4%   24.2% / 74.2%   16.9% / 52.3%"):
        assert row in table, row
    assert "plain NOT met,\n    mtp NOT met, tensor NOT met" in out and "tesla-p40 left out: fraction FALLBACK 0.70" in out
    assert "kept apart (rows the fit never saw, any card, Windows aside): 13 rows, median 10.0%" in out
    # 136 since the h41model merge (was 130): the six vLLM MTP rows h42 counted "not modelled" are answered by the
    # vLLM model (lab.predict.vllm_speed), each at its own k and tokens per step, as its check predicts them
    assert "coverage: lab predict asked each of the 139 llama.cpp / vLLM public rows as typed: 136 answered" in out
    rc, out, _ = run(["--validate", "--json"], capsys)
    got = json.loads(out)
    assert rc == 0 and set(got["groups"]) == {"plain", "mtp", "tensor", "depth", "p-min", "windows", "kept apart"}
    assert got["groups"]["plain"]["loco"] == {"n": 19, "median_abs_error": 0.054, "max_abs_error": 0.428}
    assert got["targets"]["by_group"] == {"plain": False, "mtp": False, "tensor": False}
    assert got["coverage"]["wrong"] == [] and got["coverage"]["answered"] == 136


def test_the_verb_is_registered_with_its_own_parser(capsys):
    from lab import __main__ as cli_main

    assert cli_main.OWN_PARSERS["predict"] == "lab.predict.predict_cli"
    assert cli_main.main(["predict", "--gpu", "3090", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["card_id"] == "rtx-3090" and row["model"]["fraction_from"].startswith("ampere: fitted")


def test_vllm_overhead_of_the_hybrid_is_its_owners_logged_figure_per_set_up():
    """Issue 42: vLLM's memory beyond weights and KV for Qwen3.8-27B is what owners' vLLM logs print for it (non-torch
    + peak activation + CUDA graphs: 2.87 GiB on one GPU, 2.43 GiB per GPU at TP 2), not Llama-3-8B's flat 3 / 5 GiB;
    --gpu-memory-utilization is honoured."""
    one = card_speed.predict(Ask(gpu="3090", engine="vllm", context=16384, gpu_util=0.93))
    assert one["memory"]["overhead_gib"] == 2.87 and one["memory"]["budget_gib"] == round(24 * 0.93, 2)
    two = card_speed.predict(Ask(gpu="5090", gpus=2, engine="vllm", split="tensor", context=65536))
    assert two["memory"]["overhead_gib"] == 2.43
    from lab.predict import memory_plan

    assert "syv-ai/qwen38-27b-rtx3090/issues/107" in memory_plan.runtime_overhead("vllm-qwen35")["source"]
    dense = memory_plan.runtime_overhead("vllm")  # other models keep the Llama-3-8B figure
    assert dense["bytes"] == 3 * 2**30


def test_a_laptop_part_says_its_power_limit_is_not_modelled_with_the_published_laptop_rows():
    """Issue 42: a laptop chip runs at its maker's TGP, which the model has no term for; lab predict says so beside the
    published laptop rows against the model (the 3080 Ti Laptop at 115 W half the prediction: an outlier, its PR
    names no build; the 5090 Laptop's llama-bench tg128 within 3 %)."""
    got = card_speed.predict(Ask(gpu="RTX 3080 Ti Laptop"))
    note = next(n for n in got["notes"] if "is a laptop part" in n)
    assert "power limit (TGP) is not modelled" in note and "an upper bound" in note
    assert note.index("rtx3080ti-laptop-udq3kxl-16k-plain 0.51x") < note.index("rtx5090-laptop-q40-tg128 0.97x")
    assert not any("is a laptop part" in n for n in card_speed.predict(Ask(gpu="3090"))["notes"])
