"""Where things live, answered once: the checkout's folders, the venvs set-up makes, the cache and what set-up
put in it (the llama.cpp tools and the embedded models, read from .venv/lab-paths.json; the vLLM engine's venv and
the HF-format model folder it serves, .venv-vllm/lab-vllm.json), and how many cores this process may use.

Standard library only at import: `python3 -m lab.setup` imports it with the system python before any venv exists
(tests/unit/test_layout.py), so set-up and the lab read the same locations from one place.
"""
from __future__ import annotations

import json
import os
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OUTPUTS = ROOT / "outputs"
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
DATA = ROOT / "lab" / "data"
VENV = ROOT / ".venv"  # the lab's own venv (python3 -m lab.setup)
VLLM_VENV = ROOT / ".venv-vllm"  # the vLLM engine's own venv (python3 -m lab.setup --engine vllm)
PEERS_VENV = ROOT / ".venv-peers"  # the peer benchmark clients' venv (python3 -m lab.setup --peers)
PEERS_WHY_MISSING = ROOT / ".venv-peers.missing.json"  # why set-up could not install it; removed once it did
SETUP_HINT = "run `python3 -m lab.setup --engine vllm` (or `LAB_VLLM=1 make setup`)"

# The pinned llama.cpp source (llama-cpp-python's sdist vendors it): it names the cache's sdist, build and
# tokenizer folders, so it is a location as much as a pin.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# The llama.cpp tools set-up builds and `tool()` finds. llama-batched-bench: the in-process yardstick for served
# throughput at N streams (notebook 06).
LLAMA_TOOLS = ("llama-server", "llama-bench", "llama-quantize", "llama-perplexity", "llama-batched-bench")


def cache_dir(override: str | Path | None = None) -> Path:
    """The cache folder: `override` (set-up's --cache), else $LAB_CACHE, else ~/.cache/llm-lab. A path that is (or
    lies under) a file raises NotADirectoryError naming where the path came from: every user of the cache would
    otherwise fail later, deep in a mkdir, with a traceback."""
    source = "--cache" if override else ("LAB_CACHE" if os.environ.get("LAB_CACHE") else "the default cache folder")
    path = Path(override or os.environ.get("LAB_CACHE") or Path.home() / ".cache" / "llm-lab").expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                where = "is a file" if p == path else f"lies under {p}, which is a file"
                raise NotADirectoryError(f"{source}={path}: {where}, not a folder; point {source} at a folder "
                                         "(it is made if missing)" + (", or unset LAB_CACHE for ~/.cache/llm-lab"
                                                                       if source == "LAB_CACHE" else ""))
            break
    return path


def sdist_file(cache: Path) -> Path:
    """Where set-up keeps the downloaded llama-cpp-python sdist (LAB_LLAMA_SRC can name another source)."""
    return cache / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"


def models_dir(cache: Path) -> Path:
    """cache/models/: the embedded GGUF models set-up extracts (lab.setup.models), named in .venv/lab-paths.json."""
    return cache / "models"


def vocab_dir(cache: Path) -> Path:
    """cache/vocab/<ver>/: the tokenizer GGUFs (llama.cpp's models/ggml-vocab-*.gguf) lab.model.synth copies."""
    return cache / "vocab" / LLAMA_CPP_PYTHON_VERSION


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as `nproc` counts): a container or a taskset can allow
    fewer than the machine has (os.cpu_count), and threads beyond these only wait."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class SetupMissing(RuntimeError):
    """Set-up has not run (or not completely): the message says which command fixes it."""


class VllmMissing(RuntimeError):
    """The vLLM venv or its HF-format model is not there; the message says which command makes it."""


@lru_cache(maxsize=1)
def setup_paths() -> dict:
    candidates = [Path(sys.prefix) / "lab-paths.json", VENV / "lab-paths.json"]
    for c in candidates:
        if c.exists():
            return json.loads(c.read_text())
    raise SetupMissing("set-up has not run: run `make setup` (or `make run`) in the project folder")


def tool(name: str) -> Path:
    """Path of a llama.cpp tool (one of LLAMA_TOOLS)."""
    override = os.environ.get("LAB_LLAMA_BIN")
    bin_dir = Path(override) if override else Path(setup_paths()["llama_bin"])
    path = bin_dir / name
    if not path.exists():
        raise SetupMissing(f"{path} is missing: run `make setup` to build the llama.cpp tools")
    return path


def embedded_model(key: str) -> Path:
    """The GGUF file of an embedded model ("smollm2", "gemma3-270m")."""
    models = setup_paths()["models"]
    if key not in models:
        raise KeyError(f"unknown embedded model {key!r}; known: {', '.join(models)}")
    path = Path(models[key])
    if not path.exists():
        raise SetupMissing(f"{path} is missing: run `make setup` to extract the embedded models")
    return path


def model_path(spec: str) -> Path:
    """A profile's model_file ("embedded:smollm2" or a path) → a file path."""
    if spec.startswith("embedded:"):
        return embedded_model(spec.split(":", 1)[1])
    return Path(spec).expanduser()


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


if __name__ == "__main__":  # `python -m lab.core.paths llama-server`: where set-up put a tool (`lab byhand`'s steps)
    try:
        print(tool(sys.argv[1] if len(sys.argv) > 1 else "llama-server"))
    except SetupMissing as exc:
        sys.exit(f"error: {exc}")
