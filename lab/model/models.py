"""Architecture specs: the shape numbers that KV-cache and weight-size arithmetic need.

An `ArchSpec` is read from one of two places:

* an HF `config.json` (a dict, or a file): the stand-in configs the lab ships in
  lab/data/model_configs.yaml are verbatim subsets of real config.json files, with their URLs;
* a GGUF file's metadata (lab.model.gguf_file reads only the header and tensor table; the parameter
  count is the sum of the tensor shapes, so it is exact).

A profile names its architecture as "gguf:<file or embedded:name>" or "config:<stand-in id>";
`arch_for(profile)` resolves either.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lab.core import facts
from lab.model import gguf_file

CONFIGS_DATA = "model_configs"  # lab/data/model_configs.yaml

# Which layers use the sliding window when a GGUF names a window but no per-layer pattern: llama.cpp's
# per-architecture default (src/models/<arch>.cpp, `load_swa_pattern(ml, n)`): every n-th layer is global.
_GGUF_DEFAULT_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma-embedding": 6, "cohere2": 4}
# Architectures whose GGUF describes Gated-DeltaNet linear-attention layers (llama.cpp src/models/qwen35.cpp,
# qwen3next.cpp): every `full_attention_interval`-th layer (default 4) keeps a KV cache, the others a state.
_GGUF_HYBRID_LINEAR = {"qwen35", "qwen35moe", "qwen3next"}
_LINEAR_STATE_BYTES_PER_ELEMENT = 4  # llama.cpp keeps recurrent states in F32 (llama-model.cpp create_memory)


class ModelConfigError(ValueError):
    """A config.json or GGUF lacks what the lab needs (or cannot be read); the message names the source and the field."""


@dataclass(frozen=True)
class ArchSpec:
    """The shape of a decoder-only transformer, as far as memory arithmetic needs it.

    Layers are numbered from 0. Every layer is one of: global attention (KV grows with the context),
    local attention (`local_layers`: KV capped at `sliding_window` tokens per sequence), or linear
    attention (`linear_layers`: a fixed state of `linear_state_bytes_per_layer` bytes per sequence).
    """

    name: str
    family: str  # HF model_type or GGUF general.architecture
    source: str  # where the numbers came from (URL or file)
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim_k: int
    head_dim_v: int
    hidden_size: int
    ffn_size: int
    vocab_size: int
    max_context: int
    sliding_window: int | None = None
    local_layers: tuple[int, ...] = ()
    linear_layers: tuple[int, ...] = ()
    linear_state_bytes_per_layer: int = 0  # per sequence (F32 conv + recurrent state)
    # Gated DeltaNet shape (0 when there are no linear layers): K (= Q) heads, V heads, their head dims and
    # the causal-conv kernel; llama.cpp names them ssm.group_count, ssm.time_step_rank, ssm.state_size, ssm.conv_kernel
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_head_dim_k: int = 0
    linear_head_dim_v: int = 0
    linear_conv_kernel: int = 0
    n_experts: int | None = None
    n_experts_used: int | None = None
    params: int | None = None
    params_basis: str = ""  # "gguf tensor shapes" or "config shapes (formula)"
    embedding_params: int | None = None  # token embedding + untied output head
    # Multi-token-prediction blocks stored after the trunk (HF mtp_num_hidden_layers; GGUF nextn_predict_layers,
    # counted in block_count): not in n_layers nor the main context's caches, nor in a config's params (a
    # GGUF's params count every tensor of the file). llama.cpp loads them only
    # for `--spec-type draft-mtp` (src/models/qwen35.cpp load_arch_tensors: TENSOR_SKIP unless ml.load_mtp).
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "n_kv_heads", "head_dim_k", "head_dim_v", "hidden_size",
                     "ffn_size", "vocab_size", "max_context"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ModelConfigError(f"{self.source}: {name} must be a positive integer, found {value!r}")
        for name in ("local_layers", "linear_layers"):
            bad = [i for i in getattr(self, name) if not 0 <= i < self.n_layers]
            if bad:
                raise ModelConfigError(f"{self.source}: {name} {bad} outside 0..{self.n_layers - 1}")
        both = set(self.local_layers) & set(self.linear_layers)
        if both:
            raise ModelConfigError(f"{self.source}: layers {sorted(both)} are both local and linear")
        if self.local_layers and not (self.sliding_window and self.sliding_window > 0):
            raise ModelConfigError(f"{self.source}: local layers given but no positive sliding_window")
        if self.linear_layers and self.linear_state_bytes_per_layer <= 0:
            raise ModelConfigError(f"{self.source}: linear layers given but no per-sequence state size")

    @property
    def global_layers(self) -> tuple[int, ...]:
        """Layers whose KV cache grows with every token (full attention)."""
        skip = set(self.local_layers) | set(self.linear_layers)
        return tuple(i for i in range(self.n_layers) if i not in skip)

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """Layers that keep a KV cache at all (global + local)."""
        return tuple(sorted(set(self.global_layers) | set(self.local_layers)))

    @property
    def linear_state_bytes_per_seq(self) -> int:
        return len(self.linear_layers) * self.linear_state_bytes_per_layer

    @property
    def linear_conv_elements(self) -> int:
        """llama.cpp's n_embd_r for a Gated DeltaNet layer: (conv kernel - 1) × (V heads·V dim + 2·K heads·K dim),
        the causal-conv history of the q, k, v channels (src/llama-hparams.cpp n_embd_r)."""
        return (self.linear_conv_kernel - 1) * (self.linear_value_heads * self.linear_head_dim_v
                                                + 2 * self.linear_key_heads * self.linear_head_dim_k)

    @property
    def linear_recurrent_elements(self) -> int:
        """llama.cpp's n_embd_s for a Gated DeltaNet layer: ssm_d_state × ssm_d_inner = K dim × V heads·V dim,
        one K dim × V dim matrix per V head (src/llama-hparams.cpp n_embd_s)."""
        return self.linear_head_dim_k * self.linear_value_heads * self.linear_head_dim_v

    def summary(self) -> dict:
        """One row for a table: the numbers a reader checks against the model card."""
        return {"model": self.name, "family": self.family, "layers": self.n_layers,
                "global_layers": len(self.global_layers), "local_layers": len(self.local_layers),
                "linear_layers": len(self.linear_layers), "q_heads": self.n_heads, "kv_heads": self.n_kv_heads,
                "head_dim_k": self.head_dim_k, "head_dim_v": self.head_dim_v, "hidden": self.hidden_size,
                "ffn": self.ffn_size, "vocab": self.vocab_size, "max_context": self.max_context,
                "sliding_window": self.sliding_window, "experts": self.n_experts,
                "params": self.params, "params_basis": self.params_basis, "source": self.source}

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- HF config.json
def _text_config(cfg: dict) -> dict:
    """Multimodal configs (Gemma 3, Qwen3.5) nest the language model under text_config."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        return {**{k: v for k, v in cfg.items() if k != "text_config"}, **inner}
    return cfg


def _require(cfg: dict, key: str, source: str) -> Any:
    if cfg.get(key) is None:
        raise ModelConfigError(f"{source}: config lacks required field '{key}' "
                               f"(found fields: {', '.join(sorted(cfg)) or 'none'})")
    return cfg[key]


def _layer_kinds_from_config(cfg: dict, n_layers: int, source: str) -> tuple[tuple[int, ...], tuple[int, ...], int | None]:
    """(local layers, linear layers, sliding window) from layer_types / sliding_window(_pattern) /
    full_attention_interval, following transformers' conventions for each."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if types is not None:
        if len(types) != n_layers:
            raise ModelConfigError(f"{source}: layer_types has {len(types)} entries, num_hidden_layers is {n_layers}")
        unknown = sorted(set(types) - {"full_attention", "sliding_attention", "linear_attention"})
        if unknown:
            raise ModelConfigError(f"{source}: layer_types has unknown kinds {unknown}")
        local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        linear = tuple(i for i, t in enumerate(types) if t == "linear_attention")
        if local and not window:
            raise ModelConfigError(f"{source}: layer_types has sliding_attention layers but no 'sliding_window'")
        return local, linear, (window if local else None)
    linear: tuple[int, ...] = ()
    if cfg.get("full_attention_interval"):  # Qwen3-Next / Qwen3.5: every n-th layer is full attention
        n = int(cfg["full_attention_interval"])
        linear = tuple(i for i in range(n_layers) if (i + 1) % n != 0)
    if not window or cfg.get("use_sliding_window") is False:  # Qwen2/3 carry a window they don't use
        return (), linear, None
    pattern = cfg.get("sliding_window_pattern")
    if pattern:  # Gemma 2/3: every pattern-th layer is global
        local = tuple(i for i in range(n_layers) if (i + 1) % int(pattern) != 0)
    else:  # Mistral-style: the window applies to every layer
        local = tuple(range(n_layers))
    return local, linear, window


def _linear_state_bytes(cfg: dict, source: str) -> int:
    """Gated-DeltaNet state per layer per sequence: conv state (kernel-1) × (2·K heads·K dim + V heads·V dim)
    plus recurrent state V heads × K dim × V dim, in F32 (llama.cpp llama-hparams.cpp n_embd_r/n_embd_s)."""
    nk = int(_require(cfg, "linear_num_key_heads", source))
    nv = int(_require(cfg, "linear_num_value_heads", source))
    dk = int(_require(cfg, "linear_key_head_dim", source))
    dv = int(_require(cfg, "linear_value_head_dim", source))
    kernel = int(_require(cfg, "linear_conv_kernel_dim", source))
    conv = (kernel - 1) * (2 * nk * dk + nv * dv)
    recurrent = nv * dk * dv
    return (conv + recurrent) * _LINEAR_STATE_BYTES_PER_ELEMENT


def _config_params(cfg: dict, n_layers: int, hd_k: int, hd_v: int, linear: tuple[int, ...]) -> tuple[int, int]:
    """(total, embedding) parameter count of the language model from config shapes.

    Counts embeddings, the untied output head, attention (q/k/v/o, q/k biases for qwen2, q/k norms for
    qwen3/gemma3, the output gate of Qwen3.5), the gated MLP (or MoE experts + router), linear-attention
    projections, and RMSNorm weights. Vision towers are not counted."""
    h, ffn, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    mtype = cfg.get("model_type", "")
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    q_out = heads * hd_k * (2 if cfg.get("attn_output_gate") else 1)  # Qwen3.5's q_proj also yields the gate
    attn = h * q_out + h * kv * hd_k + h * kv * hd_v + heads * hd_v * h  # q, k, v, o
    if cfg.get("attention_bias") or mtype == "qwen2":
        attn += heads * hd_k + 2 * kv * hd_k
    if mtype.startswith(("qwen3", "gemma3")):
        attn += 2 * hd_k  # q_norm, k_norm
    n_exp = cfg.get("num_experts") or cfg.get("num_local_experts")
    if n_exp:
        moe_ffn = cfg.get("moe_intermediate_size") or ffn
        mlp = n_exp * 3 * h * moe_ffn + h * n_exp
        if cfg.get("shared_expert_intermediate_size"):
            mlp += 3 * h * cfg["shared_expert_intermediate_size"] + h
    else:
        mlp = 3 * h * ffn
    norms = (4 if mtype.startswith("gemma") else 2) * h
    lin = 0
    if linear:
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        conv_dim = 2 * nk * dk + nv * dv
        lin = (h * conv_dim + h * nv * dv + 2 * h * nv  # in_proj_qkv, in_proj_z, in_proj_b/a
               + conv_dim * cfg["linear_conv_kernel_dim"] + 2 * nv + dv + nv * dv * h)  # conv, A/dt, norm, out
    per_attn_layer = attn + mlp + norms
    per_linear_layer = lin + mlp + norms
    total = embed + h + (n_layers - len(linear)) * per_attn_layer + len(linear) * per_linear_layer
    return total, embed


def from_hf_config(config: dict | str | Path, name: str | None = None, source: str | None = None) -> ArchSpec:
    """An ArchSpec from an HF config.json (a dict or a path); errors name the missing field."""
    if isinstance(config, (str, Path)):
        path = Path(config)
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelConfigError(f"{path}: cannot read config.json: {exc}") from exc
        source = source or str(path)
    source = source or "config.json"
    if not isinstance(config, dict):
        raise ModelConfigError(f"{source}: expected a JSON object, found {type(config).__name__}")
    cfg = _text_config(config)
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size",
                "max_position_embeddings"):
        _require(cfg, key, source)
    n_layers, heads, hidden = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
    kv = int(cfg.get("num_key_value_heads") or heads)  # HF's own default: no GQA field means MHA
    hd = cfg.get("head_dim") or hidden // heads
    hd_k, hd_v = int(hd), int(cfg.get("v_head_dim") or hd)
    local, linear, window = _layer_kinds_from_config(cfg, n_layers, source)
    state = _linear_state_bytes(cfg, source) if linear else 0
    lin_shape = ({"linear_key_heads": int(cfg["linear_num_key_heads"]),
                  "linear_value_heads": int(cfg["linear_num_value_heads"]),
                  "linear_head_dim_k": int(cfg["linear_key_head_dim"]),
                  "linear_head_dim_v": int(cfg["linear_value_head_dim"]),
                  "linear_conv_kernel": int(cfg["linear_conv_kernel_dim"])} if linear else {})
    params, embed = _config_params(cfg, n_layers, hd_k, hd_v, linear)
    return ArchSpec(
        name=name or cfg.get("_name_or_path") or cfg.get("model_type", "model"), family=cfg.get("model_type", ""),
        source=source, n_layers=n_layers, n_heads=heads, n_kv_heads=kv, head_dim_k=hd_k, head_dim_v=hd_v,
        hidden_size=hidden, ffn_size=int(cfg["intermediate_size"]), vocab_size=int(cfg["vocab_size"]),
        max_context=int(cfg["max_position_embeddings"]), sliding_window=int(window) if window else None,
        local_layers=local, linear_layers=linear, linear_state_bytes_per_layer=state, **lin_shape,
        n_experts=cfg.get("num_experts") or cfg.get("num_local_experts"),
        n_experts_used=cfg.get("num_experts_per_tok"), params=params,
        params_basis="config shapes (formula)", embedding_params=embed,
        mtp_layers=int(cfg.get("mtp_num_hidden_layers") or 0))


# ---------------------------------------------------------------- stand-in configs (lab/data)
def stand_in_ids() -> list[str]:
    return [e["id"] for e in facts.load(CONFIGS_DATA, "configs")["configs"]]


def stand_in_entry(model_id: str) -> dict:
    """The data entry of a shipped stand-in config (id, hf_repo, source, config, published params)."""
    for entry in facts.load(CONFIGS_DATA, "configs")["configs"]:
        if entry["id"] == model_id:
            return entry
    raise KeyError(f"unknown stand-in config {model_id!r}; known: {', '.join(stand_in_ids())}")


def stand_in(model_id: str) -> ArchSpec:
    """ArchSpec of a shipped stand-in (e.g. "qwen3-32b"), read from lab/data/model_configs.yaml."""
    entry = stand_in_entry(model_id)
    return from_hf_config(entry["config"], name=entry["hf_repo"], source=entry["source"])


# ---------------------------------------------------------------- GGUF metadata (lab.model.gguf_file reads it)
def _uniform(value: Any, key: str, source: str) -> int:
    """GGUF allows per-layer arrays for some counts; the lab handles one value for all (KV) layers."""
    if isinstance(value, list):
        nonzero = sorted({int(v) for v in value if int(v) != 0})
        if len(nonzero) != 1:
            raise ModelConfigError(f"{source}: {key} differs across layers ({nonzero}); not supported")
        return nonzero[0]
    return int(value)


def from_gguf(path: str | Path, name: str | None = None) -> ArchSpec:
    """An ArchSpec from a GGUF file's metadata; parameters counted from the tensor shapes."""
    try:
        header = gguf_file.read_gguf_header(path)
    except gguf_file.GgufError as exc:
        raise ModelConfigError(str(exc)) from exc
    meta, source = header.metadata, str(path)
    arch = meta.get("general.architecture")
    if not arch:
        raise ModelConfigError(f"{path}: GGUF lacks 'general.architecture'")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    def need(key: str) -> Any:
        if get(key) is None:
            raise ModelConfigError(f"{path}: GGUF lacks '{arch}.{key}'")
        return get(key)

    # A GGUF with multi-token-prediction layers counts them in block_count after the trunk
    # (convert_hf_to_gguf: block_count += nextn_predict_layers); llama.cpp's n_layer() excludes them.
    mtp_layers = int(get("nextn_predict_layers", 0))
    n_layers = int(need("block_count")) - mtp_layers
    hidden = int(need("embedding_length"))
    heads = _uniform(need("attention.head_count"), "attention.head_count", source)
    kv = _uniform(get("attention.head_count_kv", heads), "attention.head_count_kv", source)
    hd_k = int(get("attention.key_length", hidden // heads))  # llama.cpp's default: n_embd / n_head
    hd_v = int(get("attention.value_length", hd_k))
    ffn = get("feed_forward_length", 0)
    ffn = max(int(v) for v in ffn) if isinstance(ffn, list) else int(ffn)
    vocab = get("vocab_size") or header.array_lengths.get("tokenizer.ggml.tokens")
    if not vocab:
        raise ModelConfigError(f"{path}: GGUF has neither '{arch}.vocab_size' nor tokenizer.ggml.tokens")
    window = get("attention.sliding_window")
    local: tuple[int, ...] = ()
    if window:
        pattern = get("attention.sliding_window_pattern")
        if isinstance(pattern, list):  # per-layer booleans: true = sliding window
            local = tuple(i for i, is_swa in enumerate(pattern[:n_layers]) if is_swa)
        else:
            n = pattern if pattern is not None else _GGUF_DEFAULT_SWA_PATTERN.get(arch)
            if n is None:
                raise ModelConfigError(f"{path}: sliding window {window} but no per-layer pattern, and the lab does not "
                                       f"know llama.cpp's default for '{arch}'")
            n = int(n)  # llama.cpp llama-hparams.cpp set_swa_pattern: n == 0 means every layer
            local = tuple(i for i in range(n_layers) if n == 0 or i % n < n - 1)
    linear: tuple[int, ...] = ()
    state = 0
    lin_shape: dict = {}
    if arch in _GGUF_HYBRID_LINEAR:
        recurrent = get("attention.recurrent_layers")
        if isinstance(recurrent, list):
            linear = tuple(i for i, r in enumerate(recurrent[:n_layers]) if r)
        else:
            n = int(get("full_attention_interval", 4))
            linear = tuple(i for i in range(n_layers) if (i + 1) % n != 0)
        conv, inner = int(need("ssm.conv_kernel")), int(need("ssm.inner_size"))
        d_state, groups = int(need("ssm.state_size")), int(need("ssm.group_count"))
        state = ((conv - 1) * (inner + 2 * groups * d_state) + d_state * inner) * _LINEAR_STATE_BYTES_PER_ELEMENT
        # llama.cpp src/models/qwen35.cpp: head_k_dim = head_v_dim = ssm_d_state, K heads = ssm_n_group,
        # V heads = ssm_dt_rank
        lin_shape = {"linear_key_heads": groups, "linear_value_heads": int(need("ssm.time_step_rank")),
                     "linear_head_dim_k": d_state, "linear_head_dim_v": d_state, "linear_conv_kernel": conv}
    embed = sum(math.prod(shape) for tname, shape, _ in header.tensors if tname in ("token_embd.weight", "output.weight"))
    experts, used = get("expert_count"), get("expert_used_count")
    return ArchSpec(
        name=name or meta.get("general.name") or Path(path).stem, family=arch, source=source,
        n_layers=n_layers, n_heads=heads, n_kv_heads=kv, head_dim_k=hd_k, head_dim_v=hd_v, hidden_size=hidden,
        ffn_size=ffn or 1, vocab_size=int(vocab), max_context=int(need("context_length")),
        sliding_window=int(window) if window else None, local_layers=local, linear_layers=linear,
        linear_state_bytes_per_layer=state, **lin_shape, n_experts=int(experts) if experts else None,
        n_experts_used=int(used) if used else None, params=header.n_params, params_basis="gguf tensor shapes",
        embedding_params=embed, mtp_layers=mtp_layers)


# ---------------------------------------------------------------- profiles
def arch_for(profile) -> ArchSpec:
    """The ArchSpec a profile's `model_architecture` names: "gguf:<path or embedded:name>" or "config:<id>"."""
    spec = profile.model_architecture
    kind, _, ref = spec.partition(":")
    if kind == "config":
        return stand_in(ref)
    if kind == "gguf":
        from lab.core import paths

        return from_gguf(paths.model_path(ref), name=profile.model_name)
    raise ModelConfigError(f"profile {profile.name}: model_architecture {spec!r} must start with 'gguf:' or 'config:'")


def params_billions(arch: ArchSpec) -> float | None:
    return None if arch.params is None else round(arch.params / 1e9, 3)


__all__ = ["ArchSpec", "ModelConfigError", "from_hf_config", "from_gguf", "stand_in", "stand_in_ids", "stand_in_entry",
           "arch_for", "params_billions"]
