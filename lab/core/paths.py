"""Where set-up put things: the llama.cpp tools and the embedded models (read from .venv/lab-paths.json), and
the vLLM engine's venv and the HF-format model folder it serves (.venv-vllm/lab-vllm.json)."""
from __future__ import annotations

import json
import os
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OUTPUTS = ROOT / "outputs"
NOTEBOOKS = ROOT / "notebooks"
VLLM_VENV = ROOT / ".venv-vllm"  # the vLLM engine's own venv (python3 -m lab.setup --engine vllm)
SETUP_HINT = "run `python3 -m lab.setup --engine vllm` (or `LAB_VLLM=1 make setup`)"


class SetupMissing(RuntimeError):
    """Set-up has not run (or not completely): the message says which command fixes it."""


class VllmMissing(RuntimeError):
    """The vLLM venv or its HF-format model is not there; the message says which command makes it."""


@lru_cache(maxsize=1)
def setup_paths() -> dict:
    candidates = [Path(sys.prefix) / "lab-paths.json", ROOT / ".venv" / "lab-paths.json"]
    for c in candidates:
        if c.exists():
            return json.loads(c.read_text())
    raise SetupMissing("set-up has not run: run `make setup` (or `make run`) in the project folder")


def tool(name: str) -> Path:
    """Path of a llama.cpp tool (llama-server, llama-bench, llama-quantize, llama-perplexity)."""
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
