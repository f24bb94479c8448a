"""The lab's one wrapper of llama.cpp's `llama-bench -o json`: in-process prompt processing (pp) and
generation (tg) speed of one or more model files, without HTTP, JSON streaming or a scheduler in the way.

    result = llama_bench.run(model, threads=2, n_prompt=64, n_gen=32, reps=5)
    result["tg"]["tok_s"]          # the median of the 5 repetitions' tok/s

It reports the MEDIAN of llama-bench's per-repetition samples (`samples_ts`) as `tok_s`. Why not the mean
llama-bench prints (`avg_ts`): the lab runs on machines shared with other work (this 2-core box, lent GPUs),
and one repetition stalled by another process drags the mean — seen here: 1.3 tok/s among samples of ~190
(notebook 03, 2-core CPU box) — while the median of three or more repetitions ignores it. llama-bench's own
mean and sample standard deviation stay beside it (`tok_s_mean`, `tok_s_sd`) for comparing with its printed
table, and every raw sample is kept (`samples_tok_s`, `samples_ns`).

Used by notebook 03 (lab.model.quant_ladder.measure_speed: the quant ladder), notebook 06
(lab.measure.bench.in_process_for), the split-mode comparison (lab.experiments.multigpu) and the speculative
verification batches (lab.experiments.speculative). It lives in the model layer because quant_ladder (model layer) calls it.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Sequence

from lab.core import evidence, paths, processes


class LlamaBenchError(RuntimeError):
    """llama-bench failed, ran too long or printed no JSON; the message has its command and output tail."""


def parse_json(text: str) -> list[dict]:
    """llama-bench -o json's stdout → one dict per test, the tool's own fields (model_filename, n_prompt,
    n_gen, n_depth, avg_ts, stddev_ts, samples_ts, build_commit, ...). Text before the array is skipped."""
    start = text.find("[")
    if start < 0:
        raise LlamaBenchError("llama-bench printed no JSON array; first lines:\n" + "\n".join(text.splitlines()[:10]))
    try:
        return json.loads(text[start:text.rfind("]") + 1])
    except json.JSONDecodeError as exc:
        raise LlamaBenchError(f"llama-bench JSON did not parse: {exc}") from exc


def test_name(row: dict) -> str:
    """llama-bench's own test label: pp<n_prompt>, tg<n_gen> or pp<n>+tg<n> (its -pg test), with @d<depth>
    when run at a context depth."""
    depth = f"@d{row['n_depth']}" if row.get("n_depth") else ""
    if row.get("n_prompt") and row.get("n_gen"):
        return f"pp{row['n_prompt']}+tg{row['n_gen']}{depth}"
    return f"pp{row['n_prompt']}{depth}" if not row.get("n_gen") else f"tg{row['n_gen']}{depth}"


def stats(row: dict) -> dict:
    """One test's speed: `tok_s` the median of the repetitions (see the module docstring for why),
    llama-bench's mean and sd beside it, the raw samples, and the settings that tell tests apart."""
    samples = row.get("samples_ts") or ([row["avg_ts"]] if row.get("avg_ts") is not None else [])
    return {"test": test_name(row), "model_filename": row.get("model_filename"), "model_size": row.get("model_size"),
            "n_prompt": row.get("n_prompt"), "n_gen": row.get("n_gen"), "n_depth": row.get("n_depth"),
            "flash_attn": row.get("flash_attn"), "n_threads": row.get("n_threads"),
            "tok_s": statistics.median(samples) if samples else None, "tok_s_mean": row.get("avg_ts"),
            "tok_s_sd": row.get("stddev_ts"), "reps": len(samples), "samples_tok_s": row.get("samples_ts"),
            "samples_ns": row.get("samples_ns")}


def command(models: str | Path | Sequence[str | Path], *, threads: int | None = None, n_prompt: int | str = 512,
            n_gen: int | str = 128, depth: int | str = 0, reps: int = 5, n_gpu_layers: int | None = None,
            flash_attn: str | None = None, extra_args: Sequence = (), tool: str | None = None,
            output: str | None = "json") -> list[str]:
    """The llama-bench argv. `n_prompt`, `n_gen`, `depth` and `flash_attn` take llama-bench's comma lists
    ("0,1") to test several values in one run; n_gpu_layers < 0 means every layer (-ngl 99). `tool`: the binary
    (default the lab's build); `output` None: llama-bench's table, for a person (lab byhand)."""
    files = [models] if isinstance(models, (str, Path)) else list(models)
    cmd = [tool or str(paths.tool("llama-bench"))]
    for m in files:
        cmd += ["-m", str(m)]
    if threads is not None:
        cmd += ["-t", str(threads)]
    cmd += ["-p", str(n_prompt), "-n", str(n_gen), "-d", str(depth), "-r", str(reps)]
    cmd += ["-o", output] if output else []
    if n_gpu_layers is not None:
        cmd += ["-ngl", str(99 if n_gpu_layers < 0 else n_gpu_layers)]
    if flash_attn is not None:
        cmd += ["-fa", flash_attn]
    return cmd + [str(a) for a in extra_args]


def run_logged(cmd: list[str], *, env: dict[str, str] | None, timeout_s: float, log: str | Path | None,
               error: type[Exception], hint: str) -> subprocess.CompletedProcess:
    """Run one of llama.cpp's bench tools: `env` added to this process's, the command, exit status and both output
    streams written to `log` when given; a timeout or a non-zero exit raises `error` naming the command (the
    stderr's last lines with the exit). Shared by llama-bench and llama-batched-bench."""
    name = Path(cmd[0]).name
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as exc:
        raise error(f"{name} ran past {timeout_s:g} s: {' '.join(cmd)}; {hint}") from exc
    if log is not None:
        log = Path(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        evidence.write_whole(log, f"$ {' '.join(cmd)}\n# exit {proc.returncode}, {time.perf_counter() - t0:.1f} s\n"
                       f"{proc.stdout}\n--- stderr\n{proc.stderr}")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        raise error(f"{name} exited {proc.returncode}: {' '.join(cmd)}\n{tail}")
    return proc


def run(models: str | Path | Sequence[str | Path], *, threads: int | None = None, n_prompt: int | str = 512,
        n_gen: int | str = 128, depth: int | str = 0, reps: int = 5, n_gpu_layers: int | None = None,
        flash_attn: str | None = None, extra_args: Sequence = (), env: dict[str, str] | None = None,
        timeout_s: float = 600, log: str | Path | None = None) -> dict:
    """Run llama-bench (after its own warm-up run) and return {"command", "env", "rows" (llama-bench's JSON,
    each with its "test" label added: build, CPU/GPU and every setting), "tests" (`stats` of each row, in
    order), "pp"/"tg" (the first pp and tg test, for the usual one-model run), "duration_s"}.

    `env` is added to this process's environment (e.g. CUDA_VISIBLE_DEVICES for a one-GPU run); `log`, when
    given, receives the command, exit status and both output streams. Raises LlamaBenchError on failure."""
    cmd = command(models, threads=threads, n_prompt=n_prompt, n_gen=n_gen, depth=depth, reps=reps,
                  n_gpu_layers=n_gpu_layers, flash_attn=flash_attn, extra_args=extra_args)
    t0 = time.perf_counter()
    env = processes.llama_cpp_env(env)
    proc = run_logged(cmd, env=env, timeout_s=timeout_s, log=log, error=LlamaBenchError,
                      hint="give it a longer timeout_s or fewer repetitions / tokens")
    rows = parse_json(proc.stdout)
    for row in rows:
        row["test"] = test_name(row)
    tests = [stats(row) for row in rows]
    return {"command": cmd, "env": dict(env or {}), "rows": rows, "tests": tests,
            "pp": next((t for t in tests if t["n_prompt"] and not t["n_gen"]), None),
            "tg": next((t for t in tests if t["n_gen"] and not t["n_prompt"]), None),
            "duration_s": time.perf_counter() - t0}


__all__ = ["LlamaBenchError", "parse_json", "test_name", "stats", "command", "run"]
