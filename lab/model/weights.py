"""How many bytes are the weights of a model at a quant type: the one answer every module uses.

`weights_bytes(quant, arch=..., model_id=..., params=...)` returns (bytes, basis):
1. exact, when `model_id` is a stand-in lab.model.models ships and lab.model.quantize models llama.cpp's per-tensor
   mix for `quant` (GGUF types: lab.model.quantize.predict_size over the stand-in's tensors, checked against
   llama-quantize);
2. else parameters × bits per weight from lab/data/weight_bits.yaml (the single bits-per-weight table,
   with its sources). Formats with `embedding_bits` (vLLM's AWQ/GPTQ/FP8...) keep the embeddings and
   output head at that width when the architecture's embedding parameter count is known.

The byte count is the tensor data (what is read once per decoded token and what occupies memory); a
GGUF file adds its header (metadata, tokenizer) on top. Reading a real file's size is the callers' job
(lab.model.gguf_file.gguf_weights_bytes, the safetensors vLLM serves): this module only predicts.
"""
from __future__ import annotations

import math

from lab.core import facts
from lab.model import quantize

# The ledger's generic "INT4" (a 4-bit GPU format without a named layout) is sized as AWQ at group 128.
ALIASES = {"INT4": "AWQ-INT4"}


def formats() -> list[dict]:
    return facts.load("weight_bits", "formats")["formats"]


def weight_format(fmt: str) -> dict:
    """The weight_bits.yaml entry of `fmt` (id, bits, optional embedding_bits, source); KeyError if unknown."""
    fmt = ALIASES.get(fmt, fmt)
    for entry in formats():
        if entry["id"] == fmt:
            return entry
    raise KeyError(f"unknown weight format {fmt!r}; known: {', '.join(e['id'] for e in formats())}")


def bits_per_weight(fmt: str) -> float:
    """Effective bits per weight of `fmt` over a whole model (weight_bits.yaml `bits`)."""
    return float(weight_format(fmt)["bits"])


def is_known(fmt: str) -> bool:
    try:
        weight_format(fmt)
    except KeyError:
        return False
    return True


def weights_bytes(quant: str, arch=None, model_id: str | None = None,
                  params: float | None = None) -> tuple[int, str]:
    """(bytes, basis) of the weights at `quant`: exact for a modelled stand-in `model_id`, else
    parameters (`arch.params`, or `params`) × weight_bits.yaml bits. KeyError for an unknown quant with
    no exact answer; ValueError when there is no parameter count to multiply."""
    if model_id and (exact := quantize.exact_gguf_bytes(model_id, quant)) is not None:
        return exact, (f"llama.cpp's per-tensor types for {quant} over {model_id}'s tensors "
                       "(lab.model.quantize.predict_size, exact against llama-quantize)")
    entry = weight_format(quant)
    n = (arch.params if arch is not None and arch.params else None) or params
    if not n:
        raise ValueError(f"no parameter count to size {quant} weights"
                         + (f" ({arch.source})" if arch is not None else ""))
    emb = getattr(arch, "embedding_params", 0) if arch is not None else 0
    if "embedding_bits" in entry and emb:
        body = n - emb
        return (math.ceil(body * entry["bits"] / 8 + emb * entry["embedding_bits"] / 8),
                f"{body / 1e9:.2f}e9 params × {entry['bits']:g} bits + {emb / 1e9:.2f}e9 embedding/output "
                f"params × {entry['embedding_bits']:g} bits ({entry['id']}, lab/data/weight_bits.yaml)")
    return (math.ceil(n * entry["bits"] / 8),
            f"{n / 1e9:.2f}e9 params × {entry['bits']:g} bits ({entry['id']}, lab/data/weight_bits.yaml)")


__all__ = ["ALIASES", "formats", "weight_format", "bits_per_weight", "is_known", "weights_bytes"]
