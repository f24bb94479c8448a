"""A vLLM stand-in for a profile's model: an HF-format folder with the real config and a tokenizer, no weights.

vLLM's own `--load-format dummy` fills every weight with random values of the config's shapes at load time, so
speed and memory (weights, KV blocks, the Gated DeltaNet state vLLM reserves, CUDA graphs) are the real model's
shape while nothing is written to disk (27B at bf16 would be 54 GB on a 64 GB disk). It is the counterpart of
lab.model.standin's random-weight GGUF for llama.cpp; its text is garbage and MTP acceptance is not the real
head's (the draft is random too).

    folder = hf_standin.make("qwen3.8-27b", cache, python)   # python: an interpreter with transformers + gguf

The folder: config.json (architectures and text_config from lab/data/model_configs.yaml, the vision tower at its
published defaults with its output width set to the text model's), the tokenizer that lab.setup.hfmodel makes
from llama.cpp's vocab GGUF of the same family, and lab-standin.json (what it is, with its source).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from lab.model import models
from lab.model import synth_metadata as sm

DONE = "lab-standin.json"
LOAD_FORMAT = ["--load-format", "dummy"]  # vLLM: random weights of the config's shapes (vllm/model_executor/model_loader/dummy_loader.py)


def hf_config(arch_id: str) -> dict:
    """config.json of `arch_id` as vLLM reads it: the Qwen3.5 family is a vision-language wrapper whose
    text_config is the decoder (vllm/transformers_utils/configs/qwen3_5.py)."""
    entry = models.stand_in_entry(arch_id)
    cfg = dict(entry["config"])
    archs = cfg.pop("architectures", None) or []
    if archs != ["Qwen3_5ForConditionalGeneration"]:
        return {**cfg, "architectures": archs, "torch_dtype": "bfloat16"}
    rotary = {k: cfg.pop(k) for k in ("partial_rotary_factor", "rope_theta") if k in cfg}
    head_dim, partial = cfg["head_dim"], rotary.get("partial_rotary_factor", 1.0)
    half = int(head_dim * partial) // 2  # mrope splits the rotary half over (t, h, w): 32 → 11, 11, 10 (published)
    third = -(-half // 3)
    section = [third, third, half - 2 * third]
    text = {**cfg, "model_type": "qwen3_5_text", "dtype": "bfloat16",
            "rope_parameters": {"rope_type": "default", **rotary, "mrope_section": section, "mrope_interleaved": True}}
    return {"architectures": archs, "model_type": "qwen3_5", "dtype": "bfloat16",
            "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
            "text_config": text, "vision_config": {"out_hidden_size": cfg["hidden_size"], "dtype": "bfloat16"}}


def folder_for(arch_id: str, cache: Path) -> Path:
    digest = hashlib.sha256(json.dumps(hf_config(arch_id), sort_keys=True).encode()).hexdigest()[:12]
    return Path(cache) / "hf-standins" / f"{arch_id}-{digest}"


def make(arch_id: str, cache: Path, python: str | Path) -> Path:
    """The stand-in folder of `arch_id` in the cache (made once; `python` makes the tokenizer when missing)."""
    from lab.setup import hfmodel

    folder = folder_for(arch_id, cache)
    if (folder / DONE).exists():
        return folder
    entry = models.stand_in_entry(arch_id)
    vocab = sm.default_vocab_path(sm.vocab_name_for(models.stand_in(arch_id)))
    tok = hfmodel.tokenizer(vocab, cache, python)
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in Path(tok["path"]).iterdir():
        if f.is_file() and f.name not in ("config.json", hfmodel.DONE_FILE):
            shutil.copy2(f, tmp / f.name)
    (tmp / "config.json").write_text(json.dumps(hf_config(arch_id), indent=2) + "\n")
    (tmp / DONE).write_text(json.dumps({
        "what": f"{entry['hf_repo']}'s config with no weights: serve with {' '.join(LOAD_FORMAT)} (random weights)",
        "arch": arch_id, "config_source": entry["source"], "tokenizer_from": str(vocab),
        "valid_for": "speed, memory, KV capacity", "not_valid_for": "text quality, MTP acceptance"}, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
    return folder
