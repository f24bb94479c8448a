"""The llama.cpp tools and shared libraries, compiled once per source version, backend and build flags and kept in
the cache under that key (build_key): a fresh clone on the same machine reuses them. Standard library only."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lab.core.paths import LLAMA_CPP_PYTHON_VERSION, LLAMA_TOOLS, usable_cores
from lab.setup.llama_source import unpack_sdist
from lab.setup.steps import sh, step


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




@step("llama.cpp tools + shared libraries (cmake, from llama-cpp-python's vendored source)")
def build_llama_cpp(cache: Path, cuda_arch: str | None) -> str | None:
    out = llama_bin_dir(cache, cuda_arch)
    if (out.parent / "build-info.json").exists() and all((out / t).exists() for t in LLAMA_TOOLS):
        return f"cached, skipped ({out})"
    jobs = str(usable_cores())  # = nproc
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = unpack_sdist(cache, Path(tmp))
        build = Path(tmp) / "build"
        log = cache / "logs" / f"build-{build_key(cuda_arch)}.log"
        # measured: 262 s for the CPU build on a 2-core AMD EPYC (2026-12-04); 206 and 270 s for CUDA sm_90 on 16 cores
        # (lent H200s, outputs/peer_clients-h200/*/pipeline.log); README "Set-up" quotes the same
        print(f"[setup]   compiling with {jobs} jobs (log: {log}); ~4-5 min (measured 262 s on 2 cores for the CPU "
              "build, 206-270 s on 16 cores for CUDA sm_90), once", flush=True)
        sh(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(build), "-G", "Ninja",
            *cmake_flags(cuda_arch)], log=log)
        sh(["cmake", "--build", str(build), "-j", jobs, "--target", *LLAMA_TOOLS, "mtmd"],
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
