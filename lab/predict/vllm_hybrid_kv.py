"""vLLM's KV cache on a GPU for a hybrid model (full attention + Gated DeltaNet), computed the way vLLM 0.25 computes it.
Pure: no files, processes or network.

On a GPU vLLM sizes the cache from the memory left after loading and a profiling pass ("Available KV cache memory:
X GiB" in its log), so the budget itself is measured, not predicted to the byte. What follows from a budget is exact
arithmetic, and that is what this module predicts (file paths inside vllm 0.25.0's `vllm/`):

- one token of one attention layer: 2 · kv_heads/TP · head_dim · KV dtype bytes (v1/kv_cache_interface.py
  FullAttentionSpec.page_size_bytes with block_size 1);
- one Gated DeltaNet state: conv state (K·k_heads·2 + V·v_heads)/TP × (conv kernel − 1 + speculative tokens) in the
  model dtype, plus the recurrent state v_heads/TP × V × K in the SSM dtype — float32 for Qwen3.5/3.8, whose config
  says mamba_ssm_dtype float32 (model_executor/layers/mamba/mamba_utils.py gated_delta_net_state_shape, _mamba_state_dtype);
- the attention block is raised until one block of one layer holds at least one state: block = a · cdiv(state,
  a · token page) with a = the attention kernel's alignment, 16 for FlashAttention and FlashInfer on Hopper
  (platforms/interface.py _align_hybrid_block_size: "Setting attention block size to N tokens"); the state page is
  padded up to the attention page ("Padding mamba page size by P%");
- layers are grouped so that every group has as many layers as the smallest type: 16 attention + 48 Gated DeltaNet →
  group size 16, 1 + 3 groups (v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size); the pool has
  group-size tensors of num_blocks pages: num_blocks = budget // page // group size (get_num_blocks);
- a request of max_model_len needs cdiv(max_model_len, block) attention blocks + one block per Gated DeltaNet group
  (two with prefix caching's "align" mode) (MambaSpec.max_memory_usage_bytes); max concurrency = num_blocks / that,
  and the logged "GPU KV cache size" is int(max concurrency · max_model_len) (get_kv_cache_capacity).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

SOURCE = ("vllm 0.25.0: platforms/interface.py _align_hybrid_block_size; v1/kv_cache_interface.py FullAttentionSpec, "
          "MambaSpec; v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, get_num_blocks, "
          "get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity")
KERNEL_BLOCK_ALIGNMENT = 16  # FlashAttention's get_supported_kernel_block_sizes: [MultipleOf(16)]; vLLM's default block too
MAMBA_BLOCKS_PER_REQUEST = {"none": 1, "align": 2}  # MambaSpec.max_memory_usage_bytes ("all" mode: not modelled)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class HybridKvPrediction:
    kv_bytes: int
    block_size: int  # the attention block, raised to hold one Gated DeltaNet state
    token_page_bytes: int  # one token of one attention layer
    state_bytes: int  # one Gated DeltaNet state (conv + recurrent) of one layer, before padding
    page_bytes: int  # one block of one layer: block_size · token_page_bytes (the state padded to it)
    padding_pct: float  # what vLLM logs as "Padding mamba page size by P%"
    group_size: int
    groups: int  # attention groups + Gated DeltaNet groups
    num_blocks: int
    blocks_per_request: int
    max_model_len: int
    max_concurrency: float
    tokens: int  # what vLLM logs as "GPU KV cache size: N tokens"

    def as_dict(self) -> dict:
        return asdict(self)


def layout(arch, dtype_bytes: int, ssm_dtype_bytes: int = 4, tp: int = 1, num_spec: int = 0,
           alignment: int = KERNEL_BLOCK_ALIGNMENT) -> dict:
    """Block size, pages and groups for a hybrid ArchSpec (lab.model.models): everything but the budget."""
    n_linear = len(arch.linear_layers)
    n_attn = arch.n_layers - n_linear - len(arch.local_layers)
    if not n_linear or arch.local_layers or n_attn <= 0:
        raise ValueError(f"{arch.name}: not a full-attention + Gated DeltaNet hybrid (this layout is for those)")
    for name in ("n_kv_heads", "linear_key_heads", "linear_value_heads"):
        if getattr(arch, name) % tp:
            raise ValueError(f"{arch.name}: {name} {getattr(arch, name)} does not divide by tensor parallel {tp}")
    token_page = 2 * (arch.n_kv_heads // tp) * arch.head_dim_k * dtype_bytes
    conv_dim = (arch.linear_head_dim_k * arch.linear_key_heads * 2 + arch.linear_head_dim_v * arch.linear_value_heads)
    conv = conv_dim // tp * (arch.linear_conv_kernel - 1 + num_spec) * dtype_bytes
    recurrent = arch.linear_value_heads // tp * arch.linear_head_dim_v * arch.linear_head_dim_k * ssm_dtype_bytes
    state = conv + recurrent
    block = max(alignment * _cdiv(state, alignment * token_page), KERNEL_BLOCK_ALIGNMENT)
    page = block * token_page
    small, large = sorted((n_attn, n_linear))
    group_size = large if large < small * 1.5 else small
    groups_attn, groups_linear = _cdiv(n_attn, group_size), _cdiv(n_linear, group_size)
    return {"block_size": block, "token_page_bytes": token_page, "state_bytes": state, "page_bytes": page,
            "padding_pct": round(100 * (page - state) / state, 2), "group_size": group_size,
            "groups_attn": groups_attn, "groups_linear": groups_linear}


def predict(kv_bytes: int, arch, dtype_bytes: int, max_model_len: int, ssm_dtype_bytes: int = 4, tp: int = 1,
            mamba_cache_mode: str = "none", num_spec: int = 0) -> HybridKvPrediction:
    """vLLM's blocks, tokens and max concurrency for a KV budget of kv_bytes (what its log calls available)."""
    if mamba_cache_mode not in MAMBA_BLOCKS_PER_REQUEST:
        raise ValueError(f"mamba_cache_mode {mamba_cache_mode!r}: modelled are {sorted(MAMBA_BLOCKS_PER_REQUEST)}")
    if not isinstance(max_model_len, int) or max_model_len <= 0:
        raise ValueError(f"max_model_len must be a positive integer, found {max_model_len!r}")
    lay = layout(arch, dtype_bytes, ssm_dtype_bytes, tp, num_spec)
    num_blocks = max(int(kv_bytes // lay["page_bytes"] // lay["group_size"]), 0)
    per_request = (_cdiv(max_model_len, lay["block_size"])
                   + lay["groups_linear"] * MAMBA_BLOCKS_PER_REQUEST[mamba_cache_mode])
    conc = num_blocks / per_request
    return HybridKvPrediction(kv_bytes, lay["block_size"], lay["token_page_bytes"], lay["state_bytes"],
                              lay["page_bytes"], lay["padding_pct"], lay["group_size"],
                              lay["groups_attn"] + lay["groups_linear"], num_blocks, per_request, max_model_len,
                              conc, int(conc * max_model_len))
