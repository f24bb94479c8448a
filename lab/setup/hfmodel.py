"""An HF-format copy (safetensors + tokenizer + chat template) of an embedded GGUF, for engines that need one.

vLLM serves a folder with config.json and safetensors; the lab's embedded models are GGUF files. The copy is
made once per GGUF and kept in the set-up cache, keyed by the GGUF's sha256:

    $LAB_CACHE/hf-models/<first 16 hex of sha256>-<GGUF stem>/   config.json, model.safetensors, tokenizer
                                                                  files, chat template, lab-conversion.json

The conversion needs torch + transformers + gguf, which live in the engine's venv (.venv-vllm), not in the
lab's: the lab calls `convert()`, which runs this file with the engine's interpreter:

    .venv-vllm/bin/python lab/setup/hfmodel.py convert <file.gguf> --cache <dir>   → one JSON line {"path", "cached"}

Benchmark clients need only the tokenizer (lab/setup/peers.py: .venv-peers has transformers + torch + gguf too):

    .venv-peers/bin/python lab/setup/hfmodel.py tokenizer <file.gguf> --cache <dir>   → $LAB_CACHE/hf-tokenizers/...

This file imports only the standard library at module level, so either interpreter can load it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path


DONE_FILE = "lab-conversion.json"  # written last: a folder without it is an unfinished conversion


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    """Its own copy of lab.core.evidence.sha256_file, on purpose: this file runs as a script under the vLLM
    venv's python (lab.setup.vllm), where the lab package is not importable."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def hf_dir_for(gguf: str | Path, cache: str | Path, sha256: str | None = None) -> Path:
    """Where the HF-format copy of `gguf` lives in the cache (whether or not it exists yet)."""
    gguf = Path(gguf)
    digest = sha256 or sha256_file(gguf)
    return Path(cache) / "hf-models" / f"{digest[:16]}-{gguf.stem}"


def is_converted(folder: str | Path) -> bool:
    return (Path(folder) / DONE_FILE).exists()


def convert(gguf: str | Path, cache: str | Path, python: str | Path, timeout_s: float = 900,
            what: str = "convert") -> dict:
    """Make (or find) the HF-format copy of `gguf`, running the conversion with the engine's `python`
    (`what="tokenizer"`: the tokenizer alone, see `tokenizer`).

    Returns {"path": folder, "cached": bool}. Raises RuntimeError with the converter's output on failure.
    """
    proc = subprocess.run([str(python), str(Path(__file__).resolve()), what, str(gguf), "--cache", str(cache)],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"converting {gguf} with {python} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tokenizer(gguf: str | Path, cache: str | Path, python: str | Path, timeout_s: float = 600) -> dict:
    """Make (or find) a tokenizer-only HF folder of `gguf` (tokenizer.json, config, chat template) with `python`:
    what benchmark clients load to size prompts (lab/setup/peers.py). Same return and errors as `convert`.
    A finished copy is found here, without starting `python` (importing transformers + torch takes ~15 s)."""
    done = tokenizer_dir_for(gguf, cache)
    if is_converted(done):
        return {"path": str(done), "cached": True}
    return convert(gguf, cache, python, timeout_s, what="tokenizer")


def tokenizer_dir_for(gguf: str | Path, cache: str | Path, sha256: str | None = None) -> Path:
    gguf = Path(gguf)
    return Path(cache) / "hf-tokenizers" / hf_dir_for(gguf, cache, sha256).name


# ---------------------------------------------------------------- runs inside the engine venv
def _convert_here(gguf: Path, out: Path) -> dict:
    """Load the GGUF with transformers and save it as a plain (unquantized) HF model folder.

    transformers dequantizes the GGUF into a real model, but its config then carries a GGUF
    `quantization_config` and `save_pretrained` refuses to save a quantized-by-GGUF model. So: drop
    `quantization_config`, build a fresh model from that config, load the dequantized weights into it, save.
    Weights stay float32: the dequantized Q4_1 values are float32 and would not all survive a 16-bit cast,
    and the copy should hold exactly the weights llama.cpp serves from the same file.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings (SmolLM2) may show the output head as missing; anything else is a broken conversion.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    plain.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    if not getattr(tokenizer, "chat_template", None):
        raise RuntimeError(f"{gguf.name}: no chat template came across with the tokenizer")
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "architecture": config.architectures, "dtype": "float32",
            "params": sum(p.numel() for p in plain.parameters())}


def _cached_folder(out: Path, fill) -> dict:
    """`out` when a finished copy is there; else `fill(partial) -> info` builds it beside and renames it in.

    The rename is atomic: a half-written folder is never taken for a finished one."""
    if is_converted(out):
        return {"path": str(out), "cached": True}
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    info = fill(partial)
    (partial / DONE_FILE).write_text(json.dumps(info, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return {"path": str(out), "cached": False}


def convert_here(gguf: str | Path, cache: str | Path) -> dict:
    """The cached conversion, in this interpreter (needs torch, transformers, gguf)."""
    gguf = Path(gguf).resolve()
    digest = sha256_file(gguf)

    def fill(partial: Path) -> dict:
        t0 = time.monotonic()
        info = _convert_here(gguf, partial)
        info.update({"gguf": str(gguf), "gguf_sha256": digest, "seconds": round(time.monotonic() - t0, 1),
                     "converted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        return info

    return _cached_folder(hf_dir_for(gguf, cache, digest), fill)


def tokenizer_here(gguf: str | Path, cache: str | Path) -> dict:
    """The cached tokenizer-only copy, in this interpreter (transformers reads GGUF only with torch and gguf)."""
    from transformers import AutoTokenizer
    import transformers

    gguf = Path(gguf).resolve()
    digest = sha256_file(gguf)

    def fill(partial: Path) -> dict:
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(partial))
        return {"gguf": str(gguf), "gguf_sha256": digest, "tokenizer_only": True,
                "transformers": transformers.__version__}

    return _cached_folder(tokenizer_dir_for(gguf, cache, digest), fill)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hfmodel.py", description="GGUF → HF-format folder (cached)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("gguf", type=Path)
    c.add_argument("--cache", type=Path, required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("gguf", type=Path)
    t.add_argument("--cache", type=Path, required=True)
    args = ap.parse_args(argv)
    work = convert_here if args.cmd == "convert" else tokenizer_here
    print(json.dumps(work(args.gguf, args.cache)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
