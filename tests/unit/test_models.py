"""Architecture specs from config.json and GGUF; the shipped stand-in configs."""
import json

import pytest

from lab.core import facts
from lab.model import models
from lab.model.models import ModelConfigError


# FACTS.md, "Model shapes for KV-cache math": layers, q heads, KV heads, head_dim
FACTS_TABLE = {
    "qwen3.8-27b": (64, 24, 4, 256),
    "qwen2.5-32b": (64, 40, 8, 128),
    "qwen3-32b": (64, 64, 8, 128),
    "qwen3-14b": (40, 40, 8, 128),
    "gemma-3-27b": (62, 32, 16, 128),
    "qwen3.5-27b": (64, 24, 4, 256),
    "llama-3.1-8b": (32, 32, 8, 128),
}


def test_stand_in_ids_are_the_documented_ones():
    assert sorted(models.stand_in_ids()) == sorted(FACTS_TABLE)


@pytest.mark.parametrize("model_id", sorted(FACTS_TABLE))
def test_stand_in_matches_facts_and_published_params(model_id):
    arch = models.stand_in(model_id)
    assert (arch.n_layers, arch.n_heads, arch.n_kv_heads, arch.head_dim_k) == FACTS_TABLE[model_id]
    entry = models.stand_in_entry(model_id)
    assert entry["source"].startswith("https://huggingface.co/") and entry["source"].endswith("config.json")
    assert abs(arch.params / entry["params_published"] - 1) < 0.015  # formula vs model card, within 1.5 %


def test_qwen38_27b_is_first_class():
    """The seeds' model is a real entry (not a stand-in) with its hybrid layer split and sources."""
    arch = models.stand_in("qwen3.8-27b")
    entry = models.stand_in_entry("qwen3.8-27b")
    assert entry["hf_repo"] == "Qwen/Qwen3.8-27B" and models.stand_in_ids()[0] == "qwen3.8-27b"
    assert (arch.hidden_size, arch.ffn_size, arch.vocab_size, arch.max_context) == (5120, 17408, 248_320, 262_144)
    assert (len(arch.global_layers), len(arch.linear_layers)) == (16, 48)
    assert entry["config"]["mtp_num_hidden_layers"] == 1
    assert all(s["url"].startswith("https://") and s["supports"] for s in entry["sources"])


def test_exact_param_counts():
    # safetensors totals: Qwen2.5-32B 32,763,876,352; Llama-3.1-8B 8,030,261,248
    assert models.stand_in("qwen2.5-32b").params == 32_763_876_352
    assert models.stand_in("llama-3.1-8b").params == 8_030_261_248


def test_qwen2_declared_window_is_unused():
    assert models.stand_in("qwen2.5-32b").local_layers == ()


def test_every_data_entry_is_sourced():
    data = facts.load("model_configs", "configs")
    assert all(e["source"] for e in data["configs"])


def test_config_from_file_and_nested_text_config(tmp_path):
    cfg = {"text_config": {"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256,
                           "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048,
                           "layer_types": ["sliding_attention", "full_attention", "linear_attention", "full_attention"],
                           "sliding_window": 128, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                           "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    arch = models.from_hf_config(path)
    assert arch.n_kv_heads == 4 and arch.head_dim_k == 64  # no GQA field: MHA; head_dim = hidden / heads
    assert (arch.local_layers, arch.linear_layers, arch.global_layers) == ((0,), (2,), (1, 3))


@pytest.mark.parametrize("drop", ["num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size",
                                  "intermediate_size", "max_position_embeddings"])
def test_missing_field_is_named(drop):
    cfg = dict(models.stand_in_entry("llama-3.1-8b")["config"])
    del cfg[drop]
    with pytest.raises(ModelConfigError, match=f"lacks required field '{drop}'"):
        models.from_hf_config(cfg, source="my/config.json")


def test_bad_layer_types_and_sources(tmp_path):
    cfg = dict(models.stand_in_entry("llama-3.1-8b")["config"], layer_types=["full_attention"] * 3)
    with pytest.raises(ModelConfigError, match="layer_types has 3 entries"):
        models.from_hf_config(cfg)
    with pytest.raises(KeyError, match="unknown stand-in config 'qwen3.8-14b'"):
        models.stand_in("qwen3.8-14b")
    (tmp_path / "x.gguf").write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(ModelConfigError, match="not a GGUF file"):
        models.from_gguf(tmp_path / "x.gguf")
    with pytest.raises(ModelConfigError, match="cannot read config.json"):
        models.from_hf_config(tmp_path / "missing.json")
