"""What goes into .venv: the Python bindings (llama-cpp-python carrying the very libraries built for the tools, so
the bindings and the tools are one build) and the pinned packages of pyproject.toml, with uv; offline (LAB_WHEELS),
the brought wheels and the bindings copied from the source. Standard library only."""
from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path

from lab.core.paths import LLAMA_CPP_PYTHON_VERSION, ROOT, VENV
from lab.setup.llama_build import build_key, llama_bin_dir
from lab.setup.llama_source import sdist_path, unpack_sdist
from lab.setup.steps import sh, step
from lab.setup.venv import venv_python, venv_site

UV_VERSION = "0.13.9"


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


# uv, unlike pip, writes no bytecode at install time; with PYTHONDONTWRITEBYTECODE set (as on our test machine)
# Python then never writes it either, and every process compiles pandas, plotly, Jupyter... again from source
# (~2.7 s of CPU per `.venv/bin/python -m lab`, kernel or CLI here; `make test` starts ~70). Compiled once at install: ~25 s.
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
