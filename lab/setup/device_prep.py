"""Prepare `.device/` here for a machine with no internet (a lent GPU box): everything `lab.setup` and `lab run`
need there that the repo itself does not hold, small enough to carry (the device tool carries ≤ 64 MiB with
the working tree).

    python3 -m lab.setup.device_prep [--out .device] [--cache DIR]

Writes (the folder is git-ignored):
  .device/llama-src.tar.xz  the llama-cpp-python sdist stripped to what the CPU + CUDA build needs: its
                            llama_cpp/ Python package and vendor/llama.cpp without models (but the two
                            tokenizer GGUFs lab.model.synth copies), docs, tests, examples, .git and other GPU
                            backends (≈ 40 MB unpacked, ≈ 15 MB packed)   → LAB_LLAMA_SRC
  .device/whl/*.whl         the Python packages the GPU image lacks (papermill, ipykernel, plotly, pydantic,
                            gguf, ... for CPython 3.12 manylinux x86_64)                       → LAB_WHEELS
  .device/MANIFEST.json     what is inside, sizes and sha256

Then on that machine: `LAB_LLAMA_SRC=.device/llama-src.tar.xz LAB_WHEELS=.device/whl python3 -m lab.setup`
(lab/device/run_h200.sh does this and the rest). Standard library only: it runs before any venv exists.

The embedded models (SmolLM2 for notebook 03's ladder and 05's grid: 94 MiB) do not fit one call's 64 MiB
beside .device/, so `--models` also cuts SmolLM2 into 25 MiB parts under .device-models/<i>/ (git-ignored):
the first call carries [".device", ".device-models/0"], the next ones the other parts, and on the machine
`python3 -m lab.setup.device_prep --assemble .device-models` gathers each call's parts and, once all are there and
the sha256 matches, writes the file where lab.setup would have extracted it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from lab.core.paths import LLAMA_CPP_PYTHON_VERSION, ROOT, cache_dir, models_dir, sdist_file
from lab.setup.llama_source import VOCABS
from lab.setup.models import SMOLLM2_FILE
# What the GPU image (the device tool's 'cuda' image, Python 3.12.3 at /opt/torch/.venv, package list read
# 2026-11-17) lacks of what the lab imports, with the exact versions this lab was tested with. Packages the
# image has (numpy, pandas, pyyaml, psutil, httpx, tqdm, requests, nvidia-ml-py, torch, ...) are used as they
# are there. debugpy, jedi and parso are left out: ipykernel and IPython run without them (their imports are
# optional), and they are 10 MB of the budget.
DEVICE_WHEELS = (
    "papermill==2.7.0", "nbformat==5.11.1", "nbclient==0.11.0", "ipykernel==7.4.0", "ipython==9.18.1",
    "ipython_pygments_lexers==1.1.1", "jupyter_client==8.10.0", "jupyter_core==5.9.1", "traitlets==5.16.1",
    "tornado==6.6.1", "pyzmq==27.3.0", "comm==0.2.3", "matplotlib_inline==0.2.2", "nest_asyncio2==1.7.4",
    "prompt_toolkit==3.0.53", "wcwidth==0.9.4", "stack_data==0.6.3", "asttokens==3.0.2", "executing==2.3.0",
    "pure_eval==0.2.4", "pexpect==4.9.0", "ptyprocess==0.7.0", "platformdirs==4.14.9", "fastjsonschema==2.22.3",
    "jsonschema==4.26.0", "jsonschema_specifications==2025.9.1", "referencing==0.37.0", "rpds_py==2026.9.1",
    "tenacity==9.2.1", "entrypoints==0.4.2", "plotly==7.1.0", "narwhals==2.29.0", "pydantic==2.14.4",
    "pydantic_core==2.50.5", "annotated_types==0.8.0", "typing_inspection==0.4.5", "typing_extensions==4.16.0",
    "gguf==0.19.0", "diskcache==5.6.3",  # diskcache: llama_cpp's own import (jinja2, its other need, is there)
    # report.html renders the notebooks' closing texts with mistune: without it the H200 run of 2026-12-01
    # executed all seven notebooks, then lost its report at the last step
    "mistune==3.4.0",
)
# MODE=peers (lab/device/run_h200.sh): llama-benchy and guidellm with what they import that the GPU image lacks or
# holds at another version, pinned as in lab/data/peers.lock.txt (the CPU venv's lock). Left out: llama-benchy's
# "asyncio" (an old PyPI backport; Python 3.12's own is used), guidellm's sanic (its mock server only) and the
# image's own torch, numpy, pandas, pyarrow, transformers, tokenizers, huggingface-hub, aiohttp, httpx, rich, tabulate,
# pyyaml, msgpack, uvloop, xxhash (KINDS.md's package list); pydantic & co. come with DEVICE_WHEELS. Installed with
# --no-deps into their own --target, so nothing else moves.
PEER_WHEELS = (
    "llama-benchy==0.4.0", "openai==3.57.0", "httpx2==2.16.2", "httpcore2==2.16.2", "truststore==0.10.5",
    "jiter==0.19.0", "sniffio==1.3.1", "anyio==4.16.0", "idna==3.20",
    "guidellm==0.8.0", "culsans==0.10.0", "aiologic==0.17.1", "datasets==5.2.0", "dill==0.4.1",
    "multiprocess==0.70.19", "fsspec==2026.9.0", "eval-type-backport==0.4.0", "faker==40.63.0", "ftfy==6.3.1",
    "h2==4.4.1", "hpack==4.2.0", "hyperframe==6.1.0", "loguru==0.7.3", "more-itertools==11.2.1",
    "pydantic-settings==2.16.3", "python-dotenv==1.2.4", "websockets==17.4", "click==8.4.2",
)
# pip matches manylinux tags exactly: the ones these wheels are published under (device README's recipe); 2_31:
# llguidance (vLLM). The GPU image's glibc (Ubuntu 24.04, 2.39) runs all of them.
PLATFORMS = ("manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
DEVICE_PYTHON = "3.12"

# Inside vendor/llama.cpp: folders the build never reads. ggml backends other than CPU and CUDA go too.
# (scripts/ stays: tools/ui's CMake runs scripts/ui-assets.cmake; pocs/ goes with examples/, which the lab's
# -DLLAMA_BUILD_EXAMPLES=OFF never adds.)
DROP_TOP = {"models", "docs", "media", "tests", "benches", "examples", "pocs", ".git", ".github", ".devops",
            "gguf-py", "conversion"}
KEEP_BACKENDS = {"ggml-cpu", "ggml-cuda", "ggml-blas", "ggml-rpc"}
KEEP_MODELS = set(VOCABS)
# Outside vendor/: the Python package only (its CMakeLists/pyproject are for pip wheel, not used offline).
KEEP_OUTSIDE = ("llama_cpp/", "LICENSE.md", "pyproject.toml")


def keep(member: str) -> bool:
    """Whether a path inside the sdist (`llama_cpp_python-<ver>/...`) goes into the stripped copy."""
    parts = member.split("/", 1)
    if len(parts) < 2 or not parts[1]:
        return True  # the top folder itself
    rel = parts[1]
    if not rel.startswith("vendor/llama.cpp/"):
        return rel.startswith(KEEP_OUTSIDE) or rel in ("vendor", "vendor/llama.cpp")
    inner = rel[len("vendor/llama.cpp/"):]
    first = inner.split("/", 1)[0]
    if first == "models":
        return inner == "models" or inner.removeprefix("models/") in KEEP_MODELS
    if first in DROP_TOP:
        return False
    if inner.startswith("ggml/src/ggml-") and "/" in inner[len("ggml/src/"):]:
        return inner[len("ggml/src/"):].split("/", 1)[0] in KEEP_BACKENDS
    if inner.startswith("tools/ui/tests/"):
        return False  # the web UI's test fixtures (1.9 MB); the UI's CMake and sources stay
    return True


def strip_sdist(sdist: Path, out: Path) -> dict:
    """Write the stripped source as .tar.xz; returns counts and sizes."""
    kept = dropped = kept_bytes = 0
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(sdist) as src, tarfile.open(tmp, "w:xz", preset=6) as dst:
        for m in src:
            if not keep(m.name):
                dropped += 1
                continue
            kept += 1
            if m.isfile():
                kept_bytes += m.size
                dst.addfile(m, src.extractfile(m))
            elif m.isdir() or m.issym():
                dst.addfile(m)
    tmp.replace(out)
    return {"files_kept": kept, "files_dropped": dropped, "bytes_unpacked": kept_bytes, "bytes": out.stat().st_size}


def download_wheels(dest: Path, cache: Path, wheels: tuple[str, ...] = DEVICE_WHEELS) -> list[Path]:
    """The wheels in `wheels` (DEVICE_WHEELS) for CPython 3.12 manylinux x86_64, through pip (kept in the cache)."""
    store = cache / "device-wheels"
    store.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", DEVICE_PYTHON, "--implementation", "cp", "-d", str(store)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    proc = subprocess.run(cmd + list(wheels), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"[device_prep] pip download failed:\n{proc.stderr[-3000:]}")
    wanted = {req.split("==")[0].lower().replace("-", "_"): req.split("==")[1] for req in wheels}
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    out = []
    for whl in sorted(store.glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        if wanted.get(name.lower()) == version:  # one version of each: two would stop the install there
            shutil.copy2(whl, dest / whl.name)
            out.append(dest / whl.name)
    missing = sorted(set(wanted) - {p.name.split("-")[0].lower() for p in out})
    if missing:
        sys.exit(f"[device_prep] no wheel for: {', '.join(missing)} (see {store})")
    return out


PART_BYTES = 25 << 20  # 1st call: tree ≈ 11 MB + .device ≈ 24 MB + one part; later calls: two parts each


def cut_into_parts(src: Path, out: Path, part_bytes: int, manifest_name: str, **extra) -> dict:
    """Cut `src` into parts under out/<i>/ (a fresh `out`), one folder a part, the manifest (file, bytes, sha256, each
    part's name, bytes and sha256, and `extra`) written beside part 0 as `manifest_name`; returns the manifest. The
    SmolLM2 parts here and vLLM's (lab.setup.device_vllm) are cut this one way."""
    shutil.rmtree(out, ignore_errors=True)
    parts = []
    with open(src, "rb") as fh:
        for i, chunk in enumerate(iter(lambda: fh.read(part_bytes), b"")):
            (out / str(i)).mkdir(parents=True)
            name = f"{src.name}.part{i:02d}"
            (out / str(i) / name).write_bytes(chunk)
            parts.append({"file": name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {**extra, "file": src.name, "bytes": src.stat().st_size, "sha256": sha256(src), "parts": parts}
    (out / "0" / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def split_models(out: Path, cache: Path, part_bytes: int = PART_BYTES) -> dict:
    """Cut the embedded SmolLM2 into parts under out/<i>/; returns the manifest (also out/MODELS.json)."""
    src = models_dir(cache) / SMOLLM2_FILE
    if not src.exists():
        sys.exit(f"[device_prep] {src} is missing: run `python3 -m lab.setup` here first (it extracts the model)")
    return cut_into_parts(src, out, part_bytes, "MODELS.json")


def join_parts(store: Path, manifest: dict, dest: Path) -> bool:
    """Join the manifest's parts (all in `store`) into `dest`, atomically; False, and nothing written, when the joined
    bytes' sha256 is not the manifest's. The SmolLM2 parts here and vLLM's (lab.setup.device_vllm) join this one way."""
    tmp = dest.with_name(dest.name + ".partial")
    with open(tmp, "wb") as out:
        for p in manifest["parts"]:
            out.write((store / p["file"]).read_bytes())
    if sha256(tmp) != manifest["sha256"]:
        tmp.unlink()
        return False
    tmp.replace(dest)
    return True


def assemble(parts_dir: Path, store: Path, models_dir: Path) -> str:
    """Move this call's parts (parts_dir/<i>/*) into `store` (kept between calls); when every part listed in
    MODELS.json is there, join them into models_dir/<file> (sha256 checked, atomic). Returns what happened."""
    store.mkdir(parents=True, exist_ok=True)
    for f in parts_dir.glob("*/*"):
        shutil.copy2(f, store / f.name)
    mf = store / "MODELS.json"
    if not mf.exists():
        return "waiting for the part that carries MODELS.json"
    manifest = json.loads(mf.read_text())
    dest = models_dir / manifest["file"]
    if dest.exists() and dest.stat().st_size == manifest["bytes"]:
        return f"{dest} already there"
    have = [p for p in manifest["parts"] if (store / p["file"]).exists()]
    if len(have) < len(manifest["parts"]):
        return f"{len(have)} of {len(manifest['parts'])} parts here"
    models_dir.mkdir(parents=True, exist_ok=True)
    if not join_parts(store, manifest, dest):
        return f"parts joined but the sha256 differs from {manifest['sha256'][:12]}: not written"
    return f"{dest} written ({manifest['bytes']:,} bytes, sha256 {manifest['sha256'][:12]} ok)"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.setup.device_prep", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".device", help="folder to fill (default .device, git-ignored)")
    ap.add_argument("--cache", type=Path, default=None, help="lab cache holding the sdist (default $LAB_CACHE or ~/.cache/llm-lab)")
    ap.add_argument("--models", action="store_true", help="also cut the embedded SmolLM2 into parts under .device-models/")
    ap.add_argument("--peers", action="store_true",
                    help="also fill .device-peers/whl: llama-benchy, guidellm and what they need there (MODE=peers)")
    ap.add_argument("--assemble", type=Path, default=None, metavar="PARTS",
                    help="on the device: gather the parts carried in PARTS (.device-models) and join them when complete")
    ap.add_argument("--store", type=Path, default=Path("/root/lab-device/model-parts"),
                    help="with --assemble: where parts are kept between calls")
    args = ap.parse_args(argv)
    try:
        cache = cache_dir(args.cache).resolve()
    except NotADirectoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.assemble is not None:
        print(f"[device_prep] models: {assemble(args.assemble, args.store, models_dir(cache))}")
        return 0
    sdist = sdist_file(cache)
    if not sdist.exists():
        print(f"error: {sdist} is missing: run `python3 -m lab.setup` here first (it downloads the sdist)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    src = args.out / "llama-src.tar.xz"
    stats = strip_sdist(sdist, src)
    print(f"[device_prep] {src}: {stats['files_kept']} files kept, {stats['files_dropped']} dropped, "
          f"{stats['bytes_unpacked'] / 2**20:.1f} MiB unpacked, {stats['bytes'] / 2**20:.1f} MiB packed", flush=True)
    wheels = download_wheels(args.out / "whl", cache)
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    print(f"[device_prep] {args.out / 'whl'}: {len(wheels)} wheels, {wheel_bytes / 2**20:.1f} MiB")
    manifest = {"made_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "sdist": str(sdist), "sdist_sha256": sha256(sdist),
                "source": {"file": src.name, "sha256": sha256(src), **stats},
                "wheels": [{"file": w.name, "bytes": w.stat().st_size} for w in wheels],
                "device_python": DEVICE_PYTHON, "platforms": list(PLATFORMS)}
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if args.models:
        parts = split_models(ROOT / ".device-models", cache)
        print(f"[device_prep] .device-models: {parts['file']} in {len(parts['parts'])} parts of ≤ "
              f"{PART_BYTES >> 20} MiB; carry .device-models/0 with .device, then the others")
    total = stats["bytes"] + wheel_bytes
    if args.peers:
        peers = download_wheels(ROOT / ".device-peers" / "whl", cache, PEER_WHEELS)
        peer_bytes = sum(w.stat().st_size for w in peers)
        total += peer_bytes
        print(f"[device_prep] .device-peers/whl: {len(peers)} wheels, {peer_bytes / 2**20:.1f} MiB; carry "
              f"[\".device\", \".device-peers\"] for MODE=peers")
    print(f"[device_prep] total {total / 2**20:.1f} MiB in {time.monotonic() - t0:.0f} s; carry it with the device "
          f"tool's carry: [\".device\"]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
