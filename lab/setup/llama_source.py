"""The one llama.cpp source everything is built from: llama-cpp-python's sdist (downloaded once into the cache) or
the source an offline machine brings (LAB_LLAMA_SRC), unpacked for the build, and the tokenizer GGUFs lab.model.synth
copies out of it. Standard library only."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lab.core.paths import LLAMA_CPP_PYTHON_VERSION, sdist_file, vocab_dir
from lab.setup.steps import sh, step
from lab.setup.venv import venv_python


@step(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} source (sdist)")
def fetch_sdist(cache: Path) -> str | None:
    if given_source():
        return f"given by LAB_LLAMA_SRC ({given_source()}), not downloaded"
    target = sdist_file(cache)
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


def sdist_path(cache: Path) -> Path:
    return given_source() or sdist_file(cache)


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


VOCABS = ("ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf")  # the tokenizers lab.model.synth copies into its files


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
