"""vLLM's GPU KV cache for Qwen3.8-27B (16 attention + 48 Gated DeltaNet layers), as vLLM 0.25 computes it
(lab.predict.vllm_hybrid_kv), checked against what vLLM logged on the lent H100 (outputs/h100-vllm/) and through
notebook 05's comparison (lab.measure.vllm_kv.compare_hybrid)."""
from __future__ import annotations

import pytest

from lab.core import profiles
from lab.core.paths import ROOT
from lab.measure import vllm_kv
from lab.model import models
from lab.predict import vllm_hybrid_kv as h
from lab.serving import engine_logs

ARCH = models.stand_in("qwen3.8-27b")
H100_LOG = next((ROOT / "outputs" / "h100-vllm").glob("*/logs/04_serve.log"))


def test_block_size_and_padding_are_what_vllm_logged_on_the_h100():
    # vLLM 0.25.0 on the lent H100, 2026-12-07: "Setting attention block size to 784 tokens ...", "Padding mamba page
    # size by 0.13% ..." (outputs/h100-vllm/*/logs/04_serve.log)
    logged = engine_logs.parse_vllm_log(H100_LOG.read_text(errors="replace"))
    assert (logged["attention_block_size"], logged["mamba_padding_pct"]) == (784, 0.13)
    lay = h.layout(ARCH, 2)
    assert lay == {"block_size": 784, "token_page_bytes": 4096, "state_bytes": 61_440 + 3_145_728,
                   "page_bytes": 784 * 4096, "padding_pct": 0.13, "group_size": 16, "groups_attn": 1,
                   "groups_linear": 3}


def test_a_bf16_recurrent_state_would_halve_the_block():
    # 10,240 conv channels × 3 × 2 B + 48 × 128 × 128 × 2 B = 1,634,304 B: cdiv(…, 16 × 4,096) = 25 → 400 tokens
    assert h.layout(ARCH, 2, ssm_dtype_bytes=2)["block_size"] == 400


def test_blocks_tokens_and_concurrency_for_a_budget():
    p = h.predict(30 * 2**30, ARCH, 2, 32768)
    assert (p.num_blocks, p.blocks_per_request, p.tokens) == (626, 42 + 3, 455_839)  # 30 GiB // 3,211,264 // 16
    assert round(p.max_concurrency, 2) == 13.91
    align = h.predict(30 * 2**30, ARCH, 2, 32768, mamba_cache_mode="align")
    assert align.blocks_per_request == 42 + 6 and align.tokens == int(626 / 48 * 32768)
    tp2 = h.layout(ARCH, 2, tp=2)  # half the heads a card: both pages halve, the block stays
    assert (tp2["block_size"], tp2["page_bytes"]) == (784, 784 * 2048)


def test_nonsense_is_refused():
    with pytest.raises(ValueError, match="mamba_cache_mode 'all'"):
        h.predict(1 << 30, ARCH, 2, 4096, mamba_cache_mode="all")
    with pytest.raises(ValueError, match="not a full-attention \\+ Gated DeltaNet hybrid"):
        h.layout(models.stand_in("qwen3-32b") if "qwen3-32b" in models.stand_in_ids() else
                 models.ArchSpec("dense", "llama", "test", 4, 8, 8, 64, 64, 512, 1024, 1000, 4096), 2)
    with pytest.raises(ValueError, match="does not divide by tensor parallel 3"):
        h.layout(ARCH, 2, tp=3)


def test_notebook_05_compares_a_gpu_start_row_by_row():
    prof = profiles.load("h100-vllm")
    assert vllm_kv.gpu_hybrid(prof, ARCH) and not vllm_kv.gpu_hybrid(prof, None)
    budget = 30.0  # GiB, as vLLM prints it
    blocks = int(budget * 2**30) // (784 * 4096) // 16
    log = (H100_LOG.read_text(errors="replace")
           + f"INFO [gpu_worker.py:436] Available KV cache memory: {budget:.2f} GiB\n"
           + f"INFO [kv_cache_utils.py:2146] GPU KV cache size: {int(blocks / 45 * 32768):,} tokens\n"
           + f"INFO [kv_cache_utils.py:2147] Maximum concurrency for 32,768 tokens per request: {blocks / 45:.2f}x\n")
    metrics = (f'vllm:cache_config_info{{block_size="784",cache_dtype="auto",mamba_cache_mode="none",'
               f'num_gpu_blocks="{blocks}"}} 1.0\n')
    pred, rows = vllm_kv.compare_hybrid(prof, ARCH, log, metrics)
    assert [r["match"] for r in rows] == [True] * 5, rows
    assert pred["num_blocks"] == blocks == 626 and pred["budget_source"].startswith("log")
    # no mode label: prefix caching (vLLM's default) means "align", two state blocks a request: 42 + 6
    no_mode = metrics.replace('mamba_cache_mode="none",', "")
    assert vllm_kv.compare_hybrid(prof, ARCH, log, no_mode)[0]["blocks_per_request"] == 48
    off = metrics.replace(f'num_gpu_blocks="{blocks}"', f'num_gpu_blocks="{blocks - 3}"')
    assert [r["match"] for r in vllm_kv.compare_hybrid(prof, ARCH, log, off)[1]][2] is False
    assert "784 tokens" in vllm_kv.arithmetic({"prediction": pred})
