"""lab.model.synth: the shape and exact size of a synthetic GGUF (pure), valid random blocks, and a tiny file
that the real llama.cpp loads and generates from (integration, needs `make setup`)."""
import math
import re

import numpy as np
import pytest
from conftest import setup_missing

from lab.core import paths
from lab.model import models, synth, synth_metadata, synth_shapes
from lab.model.models import ArchSpec
from shared_synth import QWEN35_ATTN, QWEN35_MTP, TINY, vocab, vocab_qwen35


# ---------------------------------------------------------------- pure: shapes and sizes
def test_qwen3_32b_plan_matches_facts():
    # FACTS.md: the H200 model was "every matrix Q4_K: 17.17 GiB, 32.76 B params".
    plan = synth_shapes.tensor_plan(models.stand_in("qwen3-32b"), "Q4_K")
    arch = models.stand_in("qwen3-32b")
    matrices = [t for t in plan if t.layout is not synth_shapes.F32]
    n_matrix = sum(t.n_elements for t in matrices)
    assert n_matrix == 32_761_446_400
    # The HF count adds Qwen3's q/k norms (2 x 128 per layer), which a llama file has no place for.
    assert arch.params - n_matrix - sum(t.n_elements for t in plan if t.layout is synth_shapes.F32) == 64 * 2 * 128
    assert sum(t.nbytes for t in matrices) == n_matrix * 144 // 256
    assert round(sum(t.nbytes for t in plan) / 2**30, 2) == 17.17
    assert len(plan) == 2 + 64 * 9 + 1
    q = next(t for t in plan if t.name == "blk.0.attn_q.weight")
    assert q.ne == (5120, 8192) and q.byte_shape == (8192, 5120 // 256 * 144)


def test_layers_override_and_q8_0():
    plan = synth_shapes.tensor_plan(models.stand_in("qwen3-32b"), "Q8_0", layers=2)
    assert {t.name.split(".")[1] for t in plan if t.name.startswith("blk.")} == {"0", "1"}
    down = next(t for t in plan if t.name == "blk.1.ffn_down.weight")
    assert down.ne == (25600, 5120) and down.nbytes == 25600 * 5120 // 32 * 34


def test_refuses_what_llama_cannot_express():
    with pytest.raises(synth_shapes.SynthError, match="mixture-of-experts"):
        synth_shapes.tensor_plan(ArchSpec(**{**TINY.to_dict(), "n_experts": 8, "n_experts_used": 2}))
    hybrid = models.stand_in("qwen3.8-27b")
    with pytest.raises(synth_shapes.SynthError, match="family 'qwen3_next'"):
        synth_shapes.tensor_plan(ArchSpec(**{**hybrid.to_dict(), "family": "qwen3_next"}))
    with pytest.raises(synth_shapes.SynthError, match="not supported"):
        synth_shapes.tensor_plan(TINY, "Q3_K")
    with pytest.raises(synth_shapes.SynthError, match="multiple of Q4_K's block"):
        synth_shapes.tensor_plan(ArchSpec(**{**TINY.to_dict(), "hidden_size": 320}))
QWEN35_LINEAR = {"attn_norm.weight": (5120,), "post_attention_norm.weight": (5120,),
                 "attn_qkv.weight": (5120, 2 * 16 * 128 + 48 * 128), "attn_gate.weight": (5120, 48 * 128),
                 "ssm_conv1d.weight": (4, 10240), "ssm_dt.bias": (48,), "ssm_a": (48,), "ssm_beta.weight": (5120, 48),
                 "ssm_alpha.weight": (5120, 48), "ssm_norm.weight": (128,), "ssm_out.weight": (48 * 128, 5120),
                 "ffn_gate.weight": (5120, 17408), "ffn_down.weight": (17408, 5120), "ffn_up.weight": (5120, 17408)}
# the MTP block's parameters: attention 5120 × (12288 + 1024 + 1024) + 6144 × 5120 = 104,857,600, q/k norms 512,
# FFN 3 × 5120 × 17408 = 267,386,880, 2 norms 10,240, eh_proj 10240 × 5120 = 52,428,800, 3 nextn norms 15,360
QWEN38_MTP_PARAMS = 104_857_600 + 512 + 267_386_880 + 10_240 + 52_428_800 + 15_360


def test_qwen38_plan_has_llama_cpps_qwen35_tensors():
    arch = models.stand_in("qwen3.8-27b")
    plan = synth_shapes.tensor_plan(arch, "Q4_K")
    by_name = {t.name: t for t in plan}
    assert len(plan) == len(by_name) == 3 + 16 * len(QWEN35_ATTN) + 48 * len(QWEN35_LINEAR) + len(QWEN35_MTP)
    assert by_name["token_embd.weight"].ne == by_name["output.weight"].ne == (5120, 248_320)
    for i in range(65):
        want = QWEN35_MTP if i == 64 else QWEN35_ATTN if (i + 1) % 4 == 0 else QWEN35_LINEAR
        got = {n.split(".", 2)[2]: t.ne for n, t in by_name.items() if n.startswith(f"blk.{i}.")}
        assert got == want, i
    assert {t.name for t in plan if t.mtp} == {f"blk.64.{n}" for n in QWEN35_MTP}  # the MTP block is blk.64, last
    assert [t.mtp for t in plan[-len(QWEN35_MTP):]] == [True] * len(QWEN35_MTP)
    f32 = {re.sub(r"^blk\.\d+\.", "", n) for n, t in by_name.items() if t.layout is synth_shapes.F32}
    assert f32 == {"output_norm.weight", "attn_norm.weight", "post_attention_norm.weight", "attn_q_norm.weight",
                   "attn_k_norm.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a", "ssm_norm.weight",
                   "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"}
    assert by_name["blk.0.ssm_a"].fill < 0  # decay exp(softplus(.) x a) < 1: the recurrence stays finite
    # the trunk holds exactly the parameters lab.model.models and lab.model.quant_formats count for Qwen3.8-27B (the
    # published 27B, without the MTP block); the file adds the MTP block
    trunk = [t for t in plan if not t.mtp]
    assert sum(t.n_elements for t in trunk) == arch.params == 26_895_998_464
    assert sum(t.n_elements for t in plan) == 26_895_998_464 + QWEN38_MTP_PARAMS == 27_320_697_856
    assert [t.name for t in synth_shapes.tensor_plan(arch, "Q4_K", mtp=0)] == [t.name for t in trunk]


def test_mtp_option_is_refused_where_llama_cpp_cannot_run_it():
    with pytest.raises(synth_shapes.SynthError, match="single MTP block"):
        synth_shapes.tensor_plan(models.stand_in("qwen3.8-27b"), mtp=2)
    with pytest.raises(synth_shapes.SynthError, match="only the qwen35"):
        synth_shapes.tensor_plan(models.stand_in("qwen3-32b"), mtp=1)
    assert models.stand_in("qwen3-32b").mtp_layers == 0 and models.stand_in("qwen3.8-27b").mtp_layers == 1


def test_qwen38_metadata_is_what_llama_cpp_reads():
    kvs = {kv.key: kv.value for kv in synth_metadata.model_kvs(models.stand_in("qwen3.8-27b"), "Q4_K", 0, 8, "v.gguf")}
    assert kvs["general.architecture"] == "qwen35"
    assert kvs["qwen35.full_attention_interval"] == 4
    assert (kvs["qwen35.ssm.conv_kernel"], kvs["qwen35.ssm.inner_size"], kvs["qwen35.ssm.state_size"],
            kvs["qwen35.ssm.time_step_rank"], kvs["qwen35.ssm.group_count"]) == (4, 6144, 128, 48, 16)
    assert (kvs["qwen35.attention.key_length"], kvs["qwen35.rope.dimension_count"]) == (256, 64)
    assert kvs["qwen35.rope.dimension_sections"] == [11, 11, 10, 0] and kvs["qwen35.rope.freq_base"] == 1e7
    assert kvs["qwen35.context_length"] == 262_144 and kvs["qwen35.vocab_size"] == 248_320
    # the MTP block counts in block_count (n_layer_all); llama.cpp's n_layer() = 9 - nextn_predict_layers = 8
    assert (kvs["qwen35.block_count"], kvs["qwen35.nextn_predict_layers"]) == (9, 1)
    no_mtp = {kv.key: kv.value for kv in synth_metadata.model_kvs(models.stand_in("qwen3.8-27b"), "Q4_K", 0, 8,
                                                                   "v.gguf", mtp=0)}
    assert no_mtp["qwen35.block_count"] == 8 and "qwen35.nextn_predict_layers" not in no_mtp


def test_qwen38_layers_keep_the_hybrid_pattern():
    arch = models.stand_in("qwen3.8-27b")
    eight = synth_shapes.llama_shape(arch, 8)
    assert eight.global_layers == (3, 7) and eight.linear_layers == (0, 1, 2, 4, 5, 6)
    with pytest.raises(synth_shapes.SynthError, match="--layers 2 keeps no full-attention layer.*multiple of 4"):
        synth_shapes.tensor_plan(arch, "Q4_K", layers=2)


def test_qwen38_full_file_size_is_predicted_exactly(vocab_qwen35):
    # 64 layers, Q4_K: written on the GPU box (lab.model.standin, `lab run --synth-if-missing`); here only its exact size
    arch, kvs, plan, size = synth.plan_file("qwen3.8-27b", "Q4_K", vocab_qwen35)
    assert size["params"] == 26_895_998_464 + QWEN38_MTP_PARAMS and size["mtp_params"] == QWEN38_MTP_PARAMS
    matrices = sum(t.nbytes for t in plan if t.layout is not synth_shapes.F32)
    assert size["tensor_bytes"] == matrices + 4 * sum(t.n_elements for t in plan if t.layout is synth_shapes.F32)
    assert size["total_bytes"] == size["header_bytes"] + sum(-(-t.nbytes // 32) * 32 for t in plan)
    # MTP block: matrices 424,673,280 weights × 144/256 bytes (Q4_K) + 26,112 F32 norm weights × 4
    assert size["mtp_bytes"] == 424_673_280 * 144 // 256 + 26_112 * 4 == 238_983_168
    # without it: the trunk's 15,138,093,056 tensor bytes (14.10 GiB) and the 15,146,290,240-byte file that the
    # H200 runs and tests/unit/test_kv_parity.py's full-model log measured (written before synth had --mtp)
    assert size["tensor_bytes"] - size["mtp_bytes"] == 15_138_093_056
    assert round(size["tensor_bytes"] / 2**30, 2) == 14.32
    *_, trunk_only = synth.plan_file("qwen3.8-27b", "Q4_K", vocab_qwen35, mtp=0)
    assert trunk_only["total_bytes"] == 15_146_290_240 and trunk_only["tensor_bytes"] == 15_138_093_056
    # with it: + the block's bytes (every one a multiple of the 32-byte alignment) + 960 bytes of header
    # (the nextn_predict_layers key and 15 tensor-table entries, padded)
    assert size["total_bytes"] == 15_146_290_240 + 238_983_168 + 960 == 15_385_274_368
    tokens = next(kv for kv in kvs if kv.key == "tokenizer.ggml.tokens").value
    assert len(tokens) == 248_320 and tokens[-1] == "[PAD248319]"  # llama.cpp's qwen35 vocab, padded


def test_qwen38_full_file_refused_when_the_disk_is_too_small(vocab_qwen35, monkeypatch, capsys, tmp_path):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(100 << 30, 90 << 30, 10 << 30))
    out = tmp_path / "q38.gguf"
    assert synth.main(["--arch", "qwen3.8-27b", "--out", str(out), "--vocab", str(vocab_qwen35), "--no-progress"]) == 1
    assert "q38.gguf (14.33 GiB, and 256 MiB left free after it) needs" in capsys.readouterr().err and not list(tmp_path.iterdir())  # 15,385,274,368 B


def test_tied_embeddings_have_no_output_head():
    gemma = models.stand_in("gemma-3-27b")  # tie_word_embeddings: the output head is token_embd
    names = {t.name for t in synth_shapes.tensor_plan(gemma)}
    assert "output.weight" not in names and "token_embd.weight" in names
    keys = {kv.key for kv in synth_metadata.model_kvs(gemma, "Q4_K", 0, None, "v.gguf")}
    assert "lab.synthetic.dropped" in keys  # the sliding window cannot be kept: said in the file


def test_predict_bytes_counts_every_field():
    VT = synth_metadata._vt()
    kvs = [synth_metadata.KV("general.architecture", "llama", VT.STRING),
           synth_metadata.KV("a.list", ["ab", "c"], VT.ARRAY, VT.STRING),
           synth_metadata.KV("a.ints", [1, 2, 3], VT.ARRAY, VT.INT32), synth_metadata.KV("a.flag", True, VT.BOOL)]
    plan = [synth_shapes.TensorPlan("w", (256, 2), synth_shapes.QUANTS["Q4_K"])]
    size = synth.predict_bytes(kvs, plan)
    meta = (8 + 20 + 4 + 8 + 5) + (8 + 6 + 4 + 12 + 10 + 9) + (8 + 6 + 4 + 12 + 12) + (8 + 6 + 4 + 1)
    table = 8 + 1 + 4 + 16 + 4 + 8
    assert size["header_bytes"] == math.ceil((24 + meta + table) / 32) * 32
    assert size["tensor_bytes"] == 288 and size["total_bytes"] == size["header_bytes"] + 288


# ---------------------------------------------------------------- random blocks are valid and small
@pytest.mark.parametrize("quant,n_in", [("Q4_K", 5120), ("Q8_0", 25600)])
def test_random_blocks_dequantize_to_small_zero_mean_weights(quant, n_in):
    from gguf import GGMLQuantizationType, quants

    t = synth_shapes.TensorPlan("w", (n_in, 64), synth_shapes.QUANTS[quant])
    raw = synth.tensor_data(t, np.random.Generator(np.random.PCG64(1)))
    assert raw.shape == t.byte_shape and raw.dtype == np.uint8
    w = quants.dequantize(raw, GGMLQuantizationType(t.layout.ggml_type))
    assert w.shape == (64, n_in) and np.isfinite(w).all()
    target = synth.weight_std(n_in)
    assert abs(w.mean()) < 0.05 * target
    assert 0.8 < w.std() / target < 1.25


def test_q4_k_scales_decode_as_packed():
    from gguf import GGMLQuantizationType, quants

    raw = synth.tensor_data(synth_shapes.TensorPlan("w", (256, 1), synth_shapes.QUANTS["Q4_K"]),
                            np.random.Generator(np.random.PCG64(3)))
    block = raw.reshape(144)
    d = float(block[0:2].view(np.float16)[0])
    # An all-zero nibble sub-block decodes to -dmin * m; all 15s to d*sc*15 - dmin*m: recover sc and m.
    zeros, fifteen = block.copy(), block.copy()
    zeros[16:] = 0
    fifteen[16:] = 0xFF
    w0 = quants.dequantize(zeros.reshape(1, 144), GGMLQuantizationType.Q4_K).reshape(8, 32)[:, 0]
    w15 = quants.dequantize(fifteen.reshape(1, 144), GGMLQuantizationType.Q4_K).reshape(8, 32)[:, 0]
    m = np.rint(-w0 / d)
    sc = np.rint((w15 - w0) / (15 * d))
    assert set(sc.tolist()) <= set(range(4, 9)) and np.array_equal(m, np.rint(sc * 7.5))


def test_vocab_missing_from_the_cache_is_copied_by_setup(monkeypatch, tmp_path, vocab_qwen35):
    """One extraction (lab.setup.llama_source.copy_vocabs) for set-up and for synth: an empty cache with the sdist
    gets the file."""
    from lab.core import paths
    from lab.setup import llama_source

    sdist = llama_source.sdist_path(paths.cache_dir())
    if not sdist.is_file():
        setup_missing(f"{sdist} is not a cached sdist", "make setup")
    monkeypatch.setenv("LAB_CACHE", str(tmp_path))
    (tmp_path / "sdist").mkdir()
    (tmp_path / "sdist" / sdist.name).symlink_to(sdist)
    got = synth_metadata.default_vocab_path(synth_metadata.QWEN35_VOCAB)
    assert got == paths.vocab_dir(tmp_path) / synth_metadata.QWEN35_VOCAB
    assert got.read_bytes() == vocab_qwen35.read_bytes()


def test_pad_vocab_fills_to_the_embedding_rows():
    VT = synth_metadata._vt()
    kvs = [synth_metadata.KV("tokenizer.ggml.tokens", ["a", "b"], VT.ARRAY, VT.STRING),
           synth_metadata.KV("tokenizer.ggml.token_type", [1, 1], VT.ARRAY, VT.INT32)]
    padded = {kv.key: kv.value for kv in synth_metadata.pad_vocab(kvs, 4)}
    assert padded["tokenizer.ggml.tokens"] == ["a", "b", "[PAD2]", "[PAD3]"]
    assert padded["tokenizer.ggml.token_type"] == [1, 1, 5, 5]  # TokenType.UNUSED
    with pytest.raises(synth_shapes.SynthError, match="3 tokens"):
        synth_metadata.pad_vocab([synth_metadata.KV("tokenizer.ggml.tokens", ["a", "b", "c"], VT.ARRAY, VT.STRING)], 2)


# ---------------------------------------------------------------- command line
def test_cli_dry_run_and_bad_usage(vocab, capsys, tmp_path):
    out = tmp_path / "m.gguf"
    assert synth.main(["--arch", "qwen3-32b", "--out", str(out), "--vocab", str(vocab), "--dry-run"]) == 0
    assert "17.17 GiB" in capsys.readouterr().out and not out.exists()
    assert synth.main(["--arch", "no-such-model", "--out", str(out)]) == 2
    assert "qwen3-32b" in capsys.readouterr().err  # the error lists the known ids


def test_cli_refuses_when_the_disk_is_too_small(vocab, monkeypatch, capsys, tmp_path):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 << 30, 9 << 30, 1 << 30))
    out = tmp_path / "m.gguf"
    assert synth.main(["--arch", "qwen3-32b", "--out", str(out), "--vocab", str(vocab), "--no-progress"]) == 1
    assert "GiB) are. Free some space, or choose another --out" in capsys.readouterr().err and not out.exists()
    assert not list(tmp_path.iterdir())
