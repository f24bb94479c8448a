"""Notebook 03's quant modules (lab.model.quant_formats, quant_targets, quant_ladder, quant_quality, lab.pages.quantize):
exact size arithmetic, llama.cpp's per-tensor choice, output parsers, verdicts (pure); the F16 reference and the real
llama-quantize ladder (integration)."""
from fractions import Fraction
from pathlib import Path

import pytest

from lab.core import disk, paths, profiles
from lab.model import models, quant_formats, quant_ladder, quant_quality, quant_targets
from lab.pages import quantize
from lab.model.quant_formats import TensorSpec


GB = 10**9
GIB = 1 << 30


# ---------------------------------------------------------------- type table
def test_bits_per_weight_from_block_layouts():
    assert quant_formats.bits_per_weight("Q4_K") == 4.5          # 144 bytes / 256 weights
    assert quant_formats.bits_per_weight("Q4_K_M") == 4.5        # a mix's nominal width is its base type's
    assert quant_formats.bits_per_weight("Q6_K") == 6.5625       # 210 / 256
    assert quant_formats.bits_per_weight("Q8_0") == 8.5          # 34 / 32
    assert quant_formats.bits_per_weight("Q4_0") == 4.5          # 18 / 32
    assert quant_formats.bits_per_weight("Q5_K_M") == 5.5        # 176 / 256
    assert quant_formats.bits_per_weight("F16") == 16


def test_type_table_agrees_with_gguf_py():
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for t in quant_formats.tensor_types().values():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[t.id]] == (t.block_weights, t.block_bytes), t.id


def test_unknown_quant_type_is_a_clear_error():
    with pytest.raises(quant_formats.QuantError, match=r"unknown quant type 'Q4_K_X'; known: .*Q4_K_M"):
        quant_formats.bits_per_weight("Q4_K_X")
    with pytest.raises(quant_formats.QuantError, match="unknown quant type"):
        quant_formats.naive_weight_bytes(1000, "INT3")
    with pytest.raises(quant_formats.QuantError, match="unknown quant type"):
        quant_formats.choose_tensor_types([TensorSpec("a.weight", (256, 2), "F16")], "Q9_9", 1)
    with pytest.raises(quant_formats.QuantError, match="unknown quant type 'Q4_K_X' for llama-quantize"):
        quant_ladder.build_ladder(None, types=["Q8_0", "Q4_K_X"])  # refused before any file is touched


def test_unmodelled_mix_and_bad_shapes_are_refused():
    with pytest.raises(quant_formats.QuantError, match="does not model"):
        quant_formats.choose_tensor_types([TensorSpec("a.weight", (256, 2), "F16")], "Q2_K", 1)
    with pytest.raises(quant_formats.QuantError, match="row length 576 is not a multiple of Q4_K's block of 256"):
        quant_formats.tensor_nbytes("Q4_K", (576, 576))
    with pytest.raises(quant_formats.QuantError, match="positive integer"):
        quant_formats.naive_weight_bytes(0, "Q4_0")


def test_tensor_and_naive_bytes_are_exact():
    assert quant_formats.tensor_nbytes("Q4_K", (256, 2)) == 288
    assert quant_formats.tensor_nbytes("Q8_0", (576, 192)) == 576 * 192 // 32 * 34
    assert quant_formats.tensor_nbytes("F32", (576,)) == 2304
    assert quant_formats.naive_weight_bytes(27_000_000_000, "Q4_K_M") == 15_187_500_000     # 27e9 × 4.5 / 8
    assert quant_formats.naive_weight_bytes(27_000_000_000, "Q8_0") == 28_687_500_000       # 27e9 × 34 / 32
    assert quant_formats.naive_weight_bytes(27_000_000_000, "F16") == 54_000_000_000
    assert quant_formats.naive_weight_bytes(134_515_008, "Q6_K") == round(Fraction(134_515_008 * 210, 256))


# ---------------------------------------------------------------- llama.cpp's per-tensor choice
def _toy_llama(n_layers=8, hidden=512, ffn=1024, vocab=1024, tied=True):
    specs = [TensorSpec("token_embd.weight", (hidden, vocab), "F16"), TensorSpec("output_norm.weight", (hidden,), "F32")]
    if not tied:
        specs.append(TensorSpec("output.weight", (hidden, vocab), "F16"))
    for i in range(n_layers):
        b = f"blk.{i}."
        specs += [TensorSpec(b + "attn_norm.weight", (hidden,), "F32"),
                  TensorSpec(b + "attn_q.weight", (hidden, hidden), "F16"),
                  TensorSpec(b + "attn_k.weight", (hidden, hidden // 4), "F16"),
                  TensorSpec(b + "attn_v.weight", (hidden, hidden // 4), "F16"),
                  TensorSpec(b + "attn_output.weight", (hidden, hidden), "F16"),
                  TensorSpec(b + "ffn_norm.weight", (hidden,), "F32"),
                  TensorSpec(b + "ffn_gate.weight", (hidden, ffn), "F16"),
                  TensorSpec(b + "ffn_up.weight", (hidden, ffn), "F16"),
                  TensorSpec(b + "ffn_down.weight", (ffn, hidden), "F16")]
    return specs


def test_q4_k_m_mix_on_a_toy_llama():
    choice = {c.name: (c.type, c.reason) for c in quant_formats.choose_tensor_types(_toy_llama(), "Q4_K_M", 8)}
    # tied embedding is the output head: Q6_K
    assert choice["token_embd.weight"] == ("Q6_K", "output")
    # use_more_bits(i, 8): i < 1, i >= 7, (i - 1) % 3 == 2 → layers 0, 3, 6, 7
    more = {0, 3, 6, 7}
    for i in range(8):
        want = "Q6_K" if i in more else "Q4_K"
        assert choice[f"blk.{i}.attn_v.weight"][0] == want
        assert choice[f"blk.{i}.ffn_down.weight"][0] == want
        assert choice[f"blk.{i}.attn_q.weight"] == ("Q4_K", "base")
        assert choice[f"blk.{i}.attn_norm.weight"] == ("F32", "kept")


def test_untied_output_and_q4_0_and_q8_0():
    specs = _toy_llama(tied=False)
    c40 = {c.name: c.type for c in quant_formats.choose_tensor_types(specs, "Q4_0", 8)}
    assert c40["output.weight"] == "Q6_K" and c40["token_embd.weight"] == "Q4_0"
    assert c40["blk.3.ffn_down.weight"] == "Q4_0"
    c80 = {c.name: c.type for c in quant_formats.choose_tensor_types(specs, "Q8_0", 8)}
    assert c80["output.weight"] == "Q8_0"  # the output rule leaves Q8_0 alone


def test_rows_not_a_multiple_of_256_fall_back():
    specs = _toy_llama(hidden=576, ffn=1536)
    c = {x.name: (x.type, x.reason) for x in quant_formats.choose_tensor_types(specs, "Q4_K_M", 8)}
    assert c["token_embd.weight"] == ("Q8_0", "output_shape")   # 576 % 256 → Q8_0 for the output head
    assert c["blk.1.attn_q.weight"] == ("Q5_0", "fallback")      # Q4_K → Q5_0
    assert c["blk.0.attn_v.weight"] == ("Q8_0", "fallback")      # Q6_K → Q8_0
    assert c["blk.1.ffn_down.weight"] == ("Q4_K", "base")        # 1536 = 6 × 256 fits
    c5 = {x.name: x.type for x in quant_formats.choose_tensor_types(specs, "Q5_K_M", 8)}
    assert c5["blk.1.attn_q.weight"] == "Q5_1"                   # Q5_K → Q5_1


def test_llama_cpp_visits_tensors_by_layer_number():
    names = ["blk.10.ffn_down.weight", "blk.2.ffn_down.weight", "output_norm.weight", "blk.1.attn_v.weight",
             "blk.1.attn_k.weight", "token_embd.weight"]
    order = [t.name for t in quant_formats.llama_cpp_order([TensorSpec(n, (256, 2), "F16") for n in names])]
    assert order == ["output_norm.weight", "token_embd.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight",
                     "blk.2.ffn_down.weight", "blk.10.ffn_down.weight"]


# ---------------------------------------------------------------- 27B-class predictions, by hand
def test_qwen3_32b_q8_0_by_hand():
    specs = quant_formats.arch_tensor_specs("qwen3-32b")
    one_d = 64 * (2 * 5120 + 2 * 128) + 5120          # attn/ffn norms + q/k norms per layer, output norm
    two_d = 32_762_123_264 - one_d
    assert quant_formats.predict_size(specs, "Q8_0", 64).tensor_bytes == two_d * 34 // 32 + one_d * 4


def test_qwen3_32b_q4_k_m_by_hand():
    h, ffn, vocab, kv = 5120, 25600, 151936, 8 * 128
    more = [i for i in range(64) if i < 8 or i >= 56 or (i - 8) % 3 == 2]
    assert len(more) == 32
    one_d = 64 * (2 * h + 2 * 128) + h
    q6k = h * vocab + len(more) * (h * kv + ffn * h)    # output head, attn_v and ffn_down in those layers
    q4k = 32_762_123_264 - one_d - q6k
    want = q6k * 210 // 256 + q4k * 144 // 256 + one_d * 4
    pred = quant_formats.predict_size(quant_formats.arch_tensor_specs("qwen3-32b"), "Q4_K_M", 64)
    assert pred.tensor_bytes == want
    assert 19.7 * GB < want < 19.8 * GB


@pytest.mark.parametrize("model_id", models.stand_in_ids())
def test_tensor_lists_count_the_same_parameters_as_lab_models(model_id):
    assert sum(t.n_elements for t in quant_formats.arch_tensor_specs(model_id)) == models.stand_in(model_id).params


def test_size_model_matches_published_sizes():
    rows = quant_targets.published_size_checks()
    assert len(rows) >= 12
    for r in rows:
        assert abs(r["diff_pct"]) < 0.25, r


def test_int4_group_arithmetic():
    out = quant_formats.int4_group_bytes([TensorSpec("blk.0.attn_q.weight", (128, 8), "F16"),
                              TensorSpec("token_embd.weight", (128, 4), "F16")])
    assert out["quantized_bytes"] == 1024 * 4 // 8 + 8 * 2 + 8 * 4 // 8   # weights + fp16 scales + 4-bit zeros
    assert out["other_bytes"] == 512 * 2


def test_target_sizes_include_the_profiles_model():
    targets = quant_targets.target_sizes(profiles.load("v100-32g-x1"))
    own = [r for r in targets if r["profile_model"]]
    assert own and {r["model_id"] for r in own} == {profiles.load("v100-32g-x1").model_architecture.split(":")[1]}


def test_vllm_plan_for_a_v100():
    plan = quant_targets.vllm_quant_plan(profiles.load("v100-32g-x1"), gpu_present=False)
    runs = {r["format"]: r["runs_here"] for r in plan["rows"]}
    assert runs["AWQ-INT4"] == "no" and runs["GGUF"] == "yes"
    assert runs["GPTQ-INT4"].startswith("yes")
    assert plan["status"].startswith("plan")
    assert any("Qwen/Qwen3.8-27B" in c for r in plan["rows"] for c in r["commands"])


def test_free_disk_error_names_needed_and_free(tmp_path):
    with pytest.raises(disk.DiskSpaceError, match=r"needs 1,000,000,000,000,000,000 bytes .* only [\d,]+ bytes"):
        disk.check_free_disk(tmp_path, 10**18, "the quant ladder")
    assert disk.check_free_disk(tmp_path, 1, "a byte") > 1


# ---------------------------------------------------------------- tool output parsing
KLD_OUT = """
kl_divergence: computing over 12 chunks, n_ctx=128, batch_size=512, n_seq=4
chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p
   1      22.8073 ±    7.4139       0.11059 ±    0.08189       0.26497 ±    0.02319    12.982 ±  2.061 %    82.540 ±  4.821 %
   2      27.5790 ±    6.0369       0.15501 ±    0.06085       0.27481 ±    0.01486    11.408 ±  1.293 %    69.841 ±  4.105 %

====== Perplexity statistics ======
Mean PPL(Q)                   :  33.516923 ±   3.234533
Mean PPL(base)                :  26.081616 ±   2.567308
Cor(ln(PPL(Q)), ln(PPL(base))):  95.17%
Mean ln(PPL(Q)/PPL(base))     :   0.250820 ±   0.030366
Mean PPL(Q)/PPL(base)         :   1.285078 ±   0.039023
Mean PPL(Q)-PPL(base)         :   7.435308 ±   1.117143

====== KL divergence statistics ======
Mean    KLD:   0.323204 ±   0.012704
Maximum KLD:   3.951942
99.9%   KLD:   2.992814
99.0%   KLD:   1.848862
Median  KLD:   0.233778
Minimum KLD:   0.000173

====== Token probability statistics ======
Mean    Δp: -4.584 ± 0.449 %
RMS Δp    : 13.162 ± 0.794 %
Same top p: 68.254 ± 1.694 %
"""


def test_parse_kld_output():
    out = quant_quality.parse_kld_output(KLD_OUT)
    assert out["kld"] == 0.323204 and out["kld_unc"] == 0.012704
    assert out["top1_pct"] == 68.254 and out["ppl"] == 33.516923 and out["ppl_base"] == 26.081616
    assert out["kld_p99"] == 1.848862 and out["kld_median"] == 0.233778
    assert out["chunks"] == 12 and out["n_ctx"] == 128
    chunks = quant_quality.parse_kld_chunks(KLD_OUT)
    assert [c["chunk"] for c in chunks] == [1, 2]
    assert chunks[1] == {"chunk": 2, "ppl": 27.579, "ln_ppl_ratio": 0.15501, "kld": 0.27481,
                         "delta_p_rms_pct": 11.408, "top1_pct": 69.841}


def test_parse_errors_are_clear():
    with pytest.raises(quant_ladder.ToolError, match="no 'ppl' line"):
        quant_quality.parse_kld_output("llama_model_load: error loading model")
    with pytest.raises(quant_ladder.ToolError, match="no final PPL"):
        quant_quality.parse_base_output("nothing")
    assert quant_quality.parse_base_output("calculating perplexity over 12 chunks, n_ctx=128, batch_size=512\n"
                               "Final estimate: PPL = 26.0816 +/- 2.56731")["ppl"] == 26.0816


def test_kld_stats_of_identical_and_shifted_logits():
    import numpy as np

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 50))
    same = quant_quality.kld_stats(logits, logits + 3.0, np.arange(5))  # a constant shift changes no probability
    assert abs(same["kld"]) < 1e-12 and same["top1_pct"] == 100.0 and abs(same["ppl"] - same["ppl_base"]) < 1e-9
    other = quant_quality.kld_stats(logits, rng.normal(size=(5, 50)), np.arange(5))
    assert other["kld"] > 0.1


def test_recommendation_rule_picks_q4_k_m_for_a_27b_on_a_v100():
    profile = profiles.load("v100-32g-x1")
    rows = [{"type": t, "file_mib": m, "kld": k, "top1_pct": 90.0, "ppl_ratio": 1.0, "tg_tok_s": 100.0}
            for t, m, k in (("Q8_0", 138, 0.006), ("Q6_K", 132, 0.012), ("Q5_K_M", 107, 0.15),
                            ("Q4_K_M", 100, 0.077), ("Q4_0", 87, 0.32))]
    rec = quantize.recommend(rows, quant_targets.target_sizes(profile), profile)
    assert rec["type"] == "Q4_K_M"   # Qwen3.8-27B: 16.5 GB, 16.6 GiB of 32 left; Q4_0 misses the Δppl bar
    assert "Q4_K_M (100.0 MiB) has lower KLD than Q5_K_M (107.0 MiB)" in rec["text"]
    # Q5_K_M (14.1 GiB left) and Q6_K (11.4 GiB) also leave ≥ 1/3 of 32 GiB: Q4_K_M is the smallest that meets it
    assert {r["type"] for r in rec["table"] if r["meets_rule"]} == {"Q4_K_M", "Q5_K_M", "Q6_K"}


# ---------------------------------------------------------------- Qwen3.8-27B: the downloads users pick
def test_qwen38_downloads_beside_the_lab_exact_sizes():
    rows = quant_targets.published_download_table("qwen3.8-27b")
    by = {(r["type"], r["listed_as"]): r for r in rows}
    # standard llama-quantize mixes of the same-shape Qwen3.6-27B, as llama.cpp printed them: exact to the digit
    mrad_q4 = by[("Q4_K_M", "Qwen3.6-27B i1-Q4_K_M (mradermacher)")]
    assert (mrad_q4["lab_bytes"], mrad_q4["lab_gib"], mrad_q4["lab_bpw"], mrad_q4["verdict"]) == \
        (16_536_406_016, 15.401, 4.919, "exact")
    mrad_iq4 = by[("IQ4_XS", "Qwen3.6-27B i1-IQ4_XS (mradermacher)")]
    assert (mrad_iq4["lab_bytes"], mrad_iq4["lab_bpw"], mrad_iq4["verdict"]) == (15_071_512_576, 4.483, "exact")
    # rounded press figures agree; custom recipes (UD, _L, overrides) are shown for scale, never "exact"
    assert by[("Q8_0", 'Qwen3.6-27B Q8_0 ("around 29GB")')]["verdict"] == "agrees"
    assert {r["verdict"] for r in rows if r["mix"] == "custom" and r["published"]} == {"custom mix"}
    assert all(r["source"] for r in rows)
    lab_only = {r["type"]: r["lab_bytes"] for r in rows if r["listed_as"] == "(lab only)"}
    assert lab_only["Q5_K_M"] == 19_220_105_216 and lab_only["Q6_K"] == 22_071_535_616


def test_iq4_xs_and_q3_k_m_mixes_follow_llama_quant():
    specs = quant_formats.arch_tensor_specs("qwen3.8-27b")
    iq4 = {c.name: c.type for c in quant_formats.choose_tensor_types(specs, "IQ4_XS", 64, n_gqa=6)}
    assert iq4["blk.0.attn_qkv.weight"] == iq4["blk.3.attn_v.weight"] == "Q5_K"  # n_gqa 6 ≥ 4
    assert iq4["blk.0.ffn_down.weight"] == "Q5_K" and iq4["blk.8.ffn_down.weight"] == "IQ4_XS"  # first 1/8, no imatrix
    assert {c.name: c.type for c in quant_formats.choose_tensor_types(specs, "IQ4_XS", 64, n_gqa=6, imatrix=True)}[
        "blk.0.ffn_down.weight"] == "IQ4_XS"
    q3 = {c.name: c.type for c in quant_formats.choose_tensor_types(specs, "Q3_K_M", 64)}
    assert (q3["blk.0.attn_qkv.weight"], q3["blk.1.attn_qkv.weight"], q3["blk.2.attn_qkv.weight"]) == ("Q5_K", "Q5_K", "Q4_K")
    assert (q3["blk.3.ffn_down.weight"], q3["blk.4.ffn_down.weight"], q3["blk.3.attn_output.weight"]) == ("Q5_K", "Q4_K", "Q4_K")
    assert q3["output.weight"] == "Q6_K" and q3["token_embd.weight"] == "Q3_K" and q3["blk.0.ffn_up.weight"] == "Q3_K"
    with pytest.raises(quant_formats.QuantError, match="n_gqa"):
        quant_formats.choose_tensor_types(specs, "IQ4_XS", 64)


# ---------------------------------------------------------------- the tool-output cache (llama-perplexity's)
def test_cached_tool_runs_once_per_key_and_says_so_when_reused(tmp_path, monkeypatch):
    calls = []

    def fake_run(name, args, log):  # a fake of the tool, for the caching logic only
        calls.append(args)
        Path(args[-1]).write_bytes(b"logprobs")
        return "Final estimate: PPL = 26.0816 +/- 2.56731"

    monkeypatch.setattr(quant_ladder, "_run_tool", fake_run)
    monkeypatch.setattr(paths, "tool", lambda name: Path("/bin") / name)
    meta, product = tmp_path / "c" / "base.json", tmp_path / "c" / "base.bin"
    args = ["-m", "ref.gguf", quant_ladder.PRODUCT]
    text, made = quant_ladder.cached_tool("llama-perplexity", args, meta, tmp_path / "a.log", product)
    assert not made["reused"] and product.read_bytes() == b"logprobs" and len(calls) == 1
    assert calls[0][-1] != str(product)  # written under a temporary name, renamed when complete
    again, made2 = quant_ladder.cached_tool("llama-perplexity", args, meta, tmp_path / "b.log", product)
    assert again == text and made2 == {**made, "reused": True} and len(calls) == 1
    assert (tmp_path / "b.log").read_text().startswith(f"# reused from the lab's cache {meta} (computed {made['computed_utc']}")
    product.unlink()  # the entry is incomplete without its file: computed again
    assert not quant_ladder.cached_tool("llama-perplexity", args, meta, None, product)[1]["reused"]
    assert len(calls) == 2
