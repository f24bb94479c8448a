"""What the tiers of tests/unit/test_synth.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
import pytest
from conftest import setup_missing

from lab.model import synth_metadata, synth_shapes
from lab.model.models import ArchSpec


TINY = ArchSpec(name="tiny", family="llama", source="tests/unit/test_synth.py", n_layers=2, n_heads=4, n_kv_heads=2,
                head_dim_k=64, head_dim_v=64, hidden_size=256, ffn_size=768, vocab_size=151936, max_context=4096)


@pytest.fixture(scope="module")
def vocab():
    try:
        return synth_metadata.default_vocab_path()
    except synth_shapes.SynthError as exc:
        setup_missing(str(exc))


@pytest.fixture(scope="module")
def vocab_qwen35():
    try:
        return synth_metadata.default_vocab_path(synth_metadata.QWEN35_VOCAB)
    except synth_shapes.SynthError as exc:
        setup_missing(str(exc))


# ---------------------------------------------------------------- the Qwen3.5 hybrid as llama.cpp's qwen35
# llama.cpp src/models/qwen35.cpp load_arch_tensors (trunk layers), names from src/llama-arch.cpp
QWEN35_ATTN = {"attn_norm.weight": (5120,), "post_attention_norm.weight": (5120,),
               "attn_q.weight": (5120, 24 * 256 * 2), "attn_k.weight": (5120, 4 * 256), "attn_v.weight": (5120, 4 * 256),
               "attn_output.weight": (24 * 256, 5120), "attn_q_norm.weight": (256,), "attn_k_norm.weight": (256,),
               "ffn_gate.weight": (5120, 17408), "ffn_down.weight": (17408, 5120), "ffn_up.weight": (5120, 17408)}
# src/models/qwen35.cpp load_block_mtp: a full-attention block of the trunk's shape + the nextn tensors
# (nextn.embed_tokens and nextn.shared_head_head are TENSOR_NOT_REQUIRED, and absent from Qwen's conversion)
QWEN35_MTP = {**QWEN35_ATTN, "nextn.eh_proj.weight": (2 * 5120, 5120), "nextn.enorm.weight": (5120,),
              "nextn.hnorm.weight": (5120,), "nextn.shared_head_norm.weight": (5120,)}
