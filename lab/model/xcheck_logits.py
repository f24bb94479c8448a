"""Logits of a GGUF file from llama-cpp-python, computed in a process of its own.

Notebook 03's KLD cross-check reads full-vocabulary logits through llama-cpp-python (lab.model.quant_quality
.crosscheck_kld). On the lab's H200 (CUDA build, 2026-12-01) that in-process call killed the Jupyter kernel with a
segfault inside libggml-cuda twice, while the same calls from a plain Python process ran: a crash of the bindings
must cost one table row, not the notebook. So the parent writes the tokens to a file, this module's `main` loads
the model and saves the logits, and the parent reads them back — or reports how the child died.

    python -m lab.model.xcheck_logits MODEL TOKENS.npy OUT.npy N_CTX N_CHUNKS FIRST THREADS
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class CrosscheckFailed(RuntimeError):
    """llama-cpp-python did not produce the logits (the child exited non-zero or was killed by a signal)."""


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def logits(model: Path, tokens, n_ctx: int, n_chunks: int, first: int, threads: int, workdir: Path,
           timeout_s: float = 600.0):
    """Logits (float64, rows = positions first..n_ctx-2 of each chunk) of `model` over `tokens`, from a child.
    The child writes llama.cpp's float32 scores as they are and the file is removed once read: 7 files of 50 MB
    each (float64) per run had made notebook 03 wait on this VM's ~70 MB/s disk; deleted before the kernel
    writes them back, they mostly never reach it."""
    import numpy as np

    workdir.mkdir(parents=True, exist_ok=True)
    tok_file, out = workdir / "tokens.npy", workdir / f"logits-{Path(model).stem}.npy"
    np.save(tok_file, np.asarray(tokens))
    out.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", "lab.model.xcheck_logits", str(model), str(tok_file), str(out),
                           str(n_ctx), str(n_chunks), str(first), str(threads)],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise CrosscheckFailed(f"llama-cpp-python on {Path(model).name}: {how_it_ended(proc.returncode)}"
                               + (f" ({' | '.join(tail)})" if tail else ""))
    try:
        return np.load(out).astype(np.float64)
    finally:
        out.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    import llama_cpp
    import numpy as np

    model, tok_file, out, n_ctx, n_chunks, first, threads = (argv or sys.argv[1:])[:7]
    n_ctx, n_chunks, first, threads = int(n_ctx), int(n_chunks), int(first), int(threads)
    tokens = np.load(tok_file)
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, flash_attn=True,
                          n_threads=threads, verbose=False)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    rows = []
    for c in range(n_chunks):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx].tolist()
        if add_bos:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        rows.append(np.array(llm.scores[first:n_ctx - 1], dtype=np.float32))  # what llama.cpp computed
    np.save(out, np.concatenate(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
