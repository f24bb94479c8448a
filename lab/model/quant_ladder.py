"""The quant ladder: notebook 03 runs the method on the embedded model (SmolLM2-135M) with the real llama.cpp tools.

1. `f16_reference`: an F16 GGUF written from the shipped quantized file (dequantized with `gguf`, every
   metadata key kept). The reference is itself dequantized from Q4_1: it is the shipped model's exact
   weights in a wider type, not the original BF16 training checkpoint.
2. `build_ladder`: `llama-quantize` from that reference to Q8_0 … Q4_0, cached outside the checkout under
   the set-up cache, keyed by the source file's sha256 (and the llama.cpp build).
3. `size_check`: each file's size against parameters × bits per weight, and against llama.cpp's own
   per-tensor type choice (lab.model.quant_formats.choose_tensor_types, which must match the file exactly).
4. `measure_speed`: `llama-bench -o json`, prompt processing and generation.

Quality against the reference is lab.model.quant_quality's (it runs its deterministic tool through
`cached_tool`, like the ladder's files); the summary, recommendation and checks are lab.pages.quantize's.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from lab.core.units import MIB
from lab.core import evidence, paths, planmode, processes
from lab.core.disk import check_free_disk
from lab.model import llama_bench
from lab.model.quant_formats import (REASONS, QuantError, SizePrediction, base_type, bits_per_weight,
                                     file_types, gguf_info, gguf_n_gqa, gguf_tensor_specs, naive_weight_bytes,
                                     predict_size, tensor_type)

DEFAULT_LADDER = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")


class ToolError(RuntimeError):
    """A llama.cpp tool failed or printed something the lab cannot parse; the message has its log tail."""


def ladder_source(profile) -> tuple[Path, str]:
    """The GGUF the ladder starts from: the profile's embedded model, else SmolLM2 (the method is the point:
    re-quantizing a 27B file needs ~55 GB of F16 and far more than this notebook's minutes)."""
    if profile.model_file and profile.model_file.startswith("embedded:"):
        return paths.model_path(profile.model_file), f"the profile's model ({profile.model_file})"
    return paths.embedded_model("smollm2"), (f"embedded:smollm2 — the profile's model ({profile.model_name}) is "
                                              "not re-quantized here; the ladder shows the method")


def _build_key() -> str:
    try:
        return str(paths.setup_paths().get("build_key") or "unknown-build")
    except paths.SetupMissing:
        return "unknown-build"


def cache_dir(source: str | Path, source_sha256: str | None = None) -> Path:
    """<set-up cache>/quant/<source stem>-<sha256[:16]>: outside the checkout, shared by runs."""
    source = Path(source)
    sha = source_sha256 or evidence.sha256_file(source)
    return Path(paths.setup_paths()["cache"]) / "quant" / f"{source.stem}-{sha[:16]}"


def _atomic_target(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest.with_name(f".{dest.name}.{os.getpid()}.partial")


def progress_bar(total: float | None, desc: str, unit: str = "it", enabled: bool = True, **kw):
    from tqdm import tqdm

    # TQDM_DISABLE: the runner sets it for executed notebooks (lab.records.runner.KERNEL_ENV); an explicit
    # disable= would otherwise override tqdm's own reading of it.
    enabled = enabled and not os.environ.get("TQDM_DISABLE")
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, **kw)


@dataclass
class Reference:
    """The F16 reference written from the shipped file."""

    path: Path
    source: Path
    source_sha256: str
    source_why: str
    sha256: str
    bytes: int
    tensors: int
    source_tensor_types: dict[str, int]
    keys_source: list[str]
    keys_reference: list[str]
    keys_changed: dict[str, list]
    reused: bool
    seconds: float
    note: str
    plan: str | None = None  # plan mode (lab.core.planmode): why nothing is timed here (sizes and cached quality only)

    @property
    def source_type(self) -> str:
        """The shipped file's main tensor type (the most common one that is not F32)."""
        quant = {k: v for k, v in self.source_tensor_types.items() if k != "F32"} or self.source_tensor_types
        return max(quant, key=quant.get)

    @property
    def keys_kept(self) -> bool:
        return set(self.keys_source) <= set(self.keys_reference)

    def table(self):
        import pandas as pd

        return pd.DataFrame([
            {"item": "source", "value": f"{self.source.name} ({self.source_why})"},
            {"item": "source sha256", "value": self.source_sha256},
            {"item": "source tensor types", "value": ", ".join(f"{k} × {v}" for k, v in self.source_tensor_types.items())},
            {"item": "reference", "value": str(self.path)},
            {"item": "reference size", "value": f"{self.bytes:,} bytes ({self.bytes / MIB:.1f} MiB)"},
            {"item": "metadata keys kept", "value": f"{len(set(self.keys_source) & set(self.keys_reference))} of "
                                                    f"{len(self.keys_source)} (changed: {self.keys_changed or 'none'})"},
            {"item": "written", "value": "reused from the cache" if self.reused else f"now, in {self.seconds:.1f} s"},
            {"item": "what it is", "value": self.note}])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["keys_kept"] = self.keys_kept
        return d


def write_f16_reference(source: str | Path, dest: str | Path, progress: bool = True) -> dict:
    """Dequantize every tensor of `source` with gguf.quants.dequantize and write an F16 GGUF to `dest`.

    Every metadata key is copied with its type; only general.file_type changes (to 1, MOSTLY_F16), because
    the file now holds F16. 1-D tensors (norms) stay F32 as llama.cpp stores them. Returns what changed."""
    import numpy as np
    import gguf
    from gguf import GGUFReader, GGUFWriter

    source, dest = Path(source), Path(dest)
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    tmp = _atomic_target(dest)
    changed = {}
    alignment = reader.fields.get("general.alignment")
    writer = GGUFWriter(tmp, arch, **({"alignment": int(alignment.contents())} if alignment else {}))
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue  # the header counts and the architecture are written by GGUFWriter itself
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == "general.file_type":
            changed[f.name] = [value, int(gguf.LlamaFileType.MOSTLY_F16)]
            value = int(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_key_value(f.name, value, vtype, sub_type=sub)
    total = sum(int(t.n_elements) for t in reader.tensors)
    with progress_bar(total, "dequantize → F16", "w", progress, unit_scale=True) as bar:
        for t in reader.tensors:
            if t.tensor_type == gguf.GGMLQuantizationType.F32:
                arr = np.array(t.data, dtype=np.float32)
            else:
                arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float16)
            arr = arr.reshape(tuple(reversed([int(x) for x in t.shape])))
            writer.add_tensor(t.name, arr)
            bar.update(int(t.n_elements))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    tmp.replace(dest)
    return {"changed": changed}


def f16_reference(profile, progress: bool = True) -> Reference:
    """The cached F16 reference of the ladder's source (written now if missing, after a disk check)."""
    source, why = ladder_source(profile)
    sha = evidence.sha256_file(source)
    folder = cache_dir(source, sha)
    dest = folder / "reference-F16.gguf"
    src = gguf_info(source)
    types = dict(Counter(t.type for t in src.tensors))
    quant = {k: v for k, v in types.items() if k != "F32"} or types
    src_type = max(quant, key=quant.get)
    t0 = time.perf_counter()
    reused = dest.exists()
    changed = {"general.file_type": [src.file_type, 1]} if src.file_type is not None else {}
    if not reused:
        params = sum(t.n_elements for t in src.tensors)
        check_free_disk(folder, int(params * 2 * 1.1) + 64 * MIB, "the F16 reference")
        changed = write_f16_reference(source, dest, progress)["changed"]
    note = (f"An F16 copy of the shipped {src_type} file: its weights are exactly the shipped model's "
            f"(dequantized {src_type} values, rounded to F16) — it is itself dequantized, not the original BF16 "
            f"checkpoint. Every loss below is a re-quantization loss from a {src_type} starting point, measured "
            "against the model you actually have; quantizing the BF16 original behaves differently (usually "
            "lower loss, and monotone in bits).")
    return Reference(path=dest, source=source, source_sha256=sha, source_why=why, sha256=evidence.sha256_file(dest),
                     bytes=dest.stat().st_size, tensors=len(src.tensors), source_tensor_types=types,
                     keys_source=list(src.keys), keys_reference=list(gguf_info(dest).keys), keys_changed=changed,
                     reused=reused, seconds=round(time.perf_counter() - t0, 2), note=note,
                     plan=planmode.reason(profile))


def _run_tool(name: str, args: list[str], log: Path | None, timeout: float = 600) -> str:
    """Run a llama.cpp tool; return stdout+stderr; on failure raise ToolError with the log's tail."""
    cmd = [str(paths.tool(name)), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **processes.llama_cpp_env()})
    text = proc.stdout + ("\n" if proc.stdout and proc.stderr else "") + proc.stderr
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        evidence.write_whole(log, f"$ {' '.join(cmd)}\n# exit {proc.returncode}, {time.perf_counter() - t0:.1f} s\n{text}")
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        raise ToolError(f"{name} exited {proc.returncode}: {' '.join(cmd)}\n{tail}")
    return text


PRODUCT = "{product}"  # placeholder in a cached tool's arguments for the file it writes


def cached_tool(name: str, args: list[str], meta: Path, log: Path | None, product: Path | None = None) -> tuple[str, dict]:
    """Run a deterministic llama.cpp tool once per cache entry and reuse it after: its output text (and the file
    it writes, `product`, passed in `args` as PRODUCT) are kept at `meta`. The caller keys `meta` by everything
    the output depends on: the input files' sha256, the text, the arguments and the llama.cpp build. A reused
    entry's log in the run folder says so, with when and how long it was computed. Returns (text, how made)."""
    if meta.exists() and (product is None or product.exists()):
        info = json.loads(meta.read_text())
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            evidence.write_whole(log, f"# reused from the lab's cache {meta} (computed {info['utc']} in "
                                 f"{info['seconds']} s; same input files, text, arguments and llama.cpp build)\n"
                                 f"$ {' '.join(info['command'])}\n{info['text']}")
        return info["text"], {"reused": True, "computed_utc": info["utc"], "seconds": info["seconds"]}
    tmp = _atomic_target(product) if product is not None else None
    argv = [str(tmp) if a == PRODUCT else a for a in args]
    t0 = time.perf_counter()
    text = _run_tool(name, argv, log)
    info = {"utc": evidence.utc_now(), "seconds": round(time.perf_counter() - t0, 2),
            "command": [str(paths.tool(name)), *argv], "text": text}
    if tmp is not None:
        tmp.replace(product)
    tmp_meta = _atomic_target(meta)
    tmp_meta.write_text(json.dumps(info))
    tmp_meta.replace(meta)
    return text, {"reused": False, "computed_utc": info["utc"], "seconds": info["seconds"]}


@dataclass
class QuantFile:
    qtype: str
    path: Path
    bytes: int
    tensor_bytes: int
    sha256: str
    reused: bool
    seconds: float | None
    fallback_tensors: int | None
    log: str | None


@dataclass
class Ladder:
    """The reference and the quantized files, largest type first."""

    reference: Reference
    files: list[QuantFile]
    folder: Path
    build: str
    threads: int

    def table(self):
        import pandas as pd

        rows = [{"type": "F16 (reference)", "file": self.reference.path.name, "bytes": self.reference.bytes,
                 "MiB": self.reference.bytes / MIB, "made": "reused" if self.reference.reused else "now"}]
        rows += [{"type": f.qtype, "file": f.path.name, "bytes": f.bytes, "MiB": f.bytes / MIB,
                  "made": (f"reused (made in {f.seconds:.1f} s)" if f.seconds else "reused") if f.reused
                  else f"now, {f.seconds:.1f} s", "fallback tensors": f.fallback_tensors} for f in self.files]
        return pd.DataFrame(rows)

    def by_type(self) -> dict[str, QuantFile]:
        return {f.qtype: f for f in self.files}


def build_ladder(reference: Reference, types: Sequence[str] = DEFAULT_LADDER, threads: int | None = None,
                 log_dir: str | Path | None = None, progress: bool = True) -> Ladder:
    """Quantize the reference to each type with the real llama-quantize (cached; disk checked first)."""
    for q in types:
        if q.upper() not in file_types():
            raise QuantError(f"unknown quant type {q!r} for llama-quantize; known: {', '.join(file_types())}")
    threads = threads or min(2, paths.usable_cores())
    build = _build_key()
    folder = reference.path.parent / build
    log_dir = Path(log_dir) / "03_quantize" if log_dir else None
    specs = gguf_tensor_specs(reference.path)
    n_layers = gguf_info(reference.path).n_layers
    missing = [q.upper() for q in types if not (folder / f"{q.upper()}.gguf").exists()]
    if missing:
        gqa = gguf_n_gqa(reference.path)
        needed = sum(predict_size(specs, q, n_layers, n_gqa=gqa).tensor_bytes if file_types()[q].get("modelled")
                     else naive_weight_bytes(sum(t.n_elements for t in specs), q) for q in missing)
        check_free_disk(folder, int(needed * 1.1) + 64 * MIB, f"{len(missing)} quantized file(s)")
    files = []
    with progress_bar(len(types), "llama-quantize", "type", progress) as bar:
        for q in (t.upper() for t in types):
            bar.set_postfix_str(q)
            dest = folder / f"{q}.gguf"
            meta = dest.with_suffix(".json")  # what llama-quantize said when it made the file
            reused = dest.exists()
            if not reused:
                tmp = _atomic_target(dest)
                log_path = (log_dir / f"llama-quantize-{q}.log") if log_dir else None
                t0 = time.perf_counter()
                text = _run_tool("llama-quantize", [str(reference.path), str(tmp), q, str(threads)], log_path)
                m = re.search(r"(\d+) of (\d+) tensor\(s\) required fallback", text)
                info = {"seconds": round(time.perf_counter() - t0, 2), "fallback_tensors": int(m.group(1)) if m else 0,
                        "threads": threads, "build": build, "log": str(log_path) if log_path else None,
                        "summary": [ln for ln in text.splitlines() if "size  =" in ln or "quantize time" in ln]}
                tmp_meta = _atomic_target(meta)
                tmp_meta.write_text(json.dumps(info, indent=2))
                tmp.replace(dest)
                tmp_meta.replace(meta)
            info = json.loads(meta.read_text()) if meta.exists() else {}
            seconds, fallback, log = info.get("seconds"), info.get("fallback_tensors"), info.get("log")
            files.append(QuantFile(q, dest, dest.stat().st_size, gguf_info(dest).tensor_bytes, evidence.sha256_file(dest),
                                   reused, seconds, fallback, log))
            bar.update(1)
    return Ladder(reference, files, folder, build, threads)


# ================================================================ size check
@dataclass
class SizeCheck:
    rows: list[dict]
    breakdown: list[dict]
    mismatches: dict[str, list[dict]]

    def table(self):
        import pandas as pd

        cols = ["type", "params", "nominal_bpw", "naive_bytes", "predicted_bytes", "tensor_bytes", "file_bytes",
                "metadata_bytes", "effective_bpw", "file_vs_naive_pct", "types_match", "why"]
        return pd.DataFrame(self.rows)[cols]

    def breakdown_table(self):
        import pandas as pd

        return pd.DataFrame(self.breakdown)


def explain_size(pred: SizePrediction, naive: int) -> str:
    """Why the exact size differs from parameters × nominal bpw, in words, largest effect first."""
    base = base_type(pred.qtype)
    parts = []
    for reason, v in sorted(pred.by_reason.items(), key=lambda kv: -kv[1]["bytes"]):
        if reason == "base":
            continue
        types = sorted({c.type for c in pred.choices if c.reason == reason})
        extra = v["bytes"] - naive_weight_bytes(v["weights"], base) if v["weights"] else 0
        parts.append(f"{v['tensors']} tensor(s), {v['weights'] / 1e6:.2f}M weights, {REASONS[reason]} "
                     f"({'/'.join(types)}; {extra / MIB:+.2f} MiB vs {base})")
    diff = pred.tensor_bytes - naive
    head = f"{diff / MIB:+.2f} MiB vs {pred.params:,} × {bits_per_weight(pred.qtype):g}/8"
    return head + (": " + "; ".join(parts) if parts else ": every tensor at the base type")


def size_check(ladder: Ladder) -> SizeCheck:
    """Each file: measured bytes vs parameters × nominal bpw vs llama.cpp's per-tensor choice (which must
    equal the file's tensor types exactly), and why they differ."""
    specs = gguf_tensor_specs(ladder.reference.path)
    n_layers = gguf_info(ladder.reference.path).n_layers
    gqa = gguf_n_gqa(ladder.reference.path)
    params = sum(t.n_elements for t in specs)
    rows, breakdown, mismatches = [], [], {}
    for f in ladder.files:
        pred = predict_size(specs, f.qtype, n_layers, n_gqa=gqa)
        actual = {t.name: t.type for t in gguf_tensor_specs(f.path)}
        bad = [{"tensor": c.name, "predicted": c.type, "file": actual.get(c.name)}
               for c in pred.choices if actual.get(c.name) != c.type]
        mismatches[f.qtype] = bad
        naive = naive_weight_bytes(params, f.qtype)
        rows.append({"type": f.qtype, "params": params, "nominal_bpw": bits_per_weight(f.qtype), "naive_bytes": naive,
                     "predicted_bytes": pred.tensor_bytes, "tensor_bytes": f.tensor_bytes, "file_bytes": f.bytes,
                     "metadata_bytes": f.bytes - f.tensor_bytes, "effective_bpw": 8 * f.tensor_bytes / params,
                     "file_vs_naive_pct": 100 * (f.bytes - naive) / naive,
                     "predicted_equals_file": pred.tensor_bytes == f.tensor_bytes,
                     "types_match": f"{len(specs) - len(bad)}/{len(specs)}", "why": explain_size(pred, naive)})
        for t, v in sorted(pred.by_type.items(), key=lambda kv: -kv[1]["bytes"]):
            breakdown.append({"type": f.qtype, "tensor_type": t, "tensors": v["tensors"], "weights": v["weights"],
                              "bytes": v["bytes"], "bpw": tensor_type(t).bits_per_weight,
                              "share_of_bytes_pct": 100 * v["bytes"] / pred.tensor_bytes})
    return SizeCheck(rows, breakdown, mismatches)


# ================================================================ speed: llama-bench
@dataclass
class Speed:
    rows: list[dict]
    raw: list[dict]
    settings: dict

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows)


def measure_speed(ladder: Ladder, n_prompt: int = 64, n_gen: int = 32, reps: int = 3,
                  include_reference: bool = True, log_dir: str | Path | None = None, progress: bool = True) -> Speed:
    """Prompt processing (pp) and generation (tg) tokens/s of every file, from one `llama-bench -o json` run
    (after llama-bench's warm-up; `*_tok_s` is the median of the `reps` samples, `*_mean`/`*_sd` llama-bench's).
    In plan mode (ladder.reference.plan) nothing is timed: rows are empty and settings say why."""
    if ladder.reference.plan:
        return Speed([], [], {"skipped": f"{ladder.reference.plan}: llama-bench not run", "n_prompt": n_prompt,
                              "n_gen": n_gen, "reps": reps, "threads": ladder.threads, "cores": os.cpu_count(),
                              "load_avg_before": None, "load_avg_after": None, "build": None, "cpu": None})
    files = ([("F16 (reference)", ladder.reference.path)] if include_reference else []) + \
            [(f.qtype, f.path) for f in ladder.files]
    load_before = os.getloadavg()[0]
    with progress_bar(1, f"llama-bench ({len(files)} files × pp{n_prompt}/tg{n_gen} × {reps})", "run", progress) as bar:
        result = llama_bench.run([p for _, p in files], threads=ladder.threads, n_prompt=n_prompt, n_gen=n_gen,
                                 reps=reps, flash_attn="on", timeout_s=600,
                                 log=Path(log_dir) / "03_quantize" / "llama-bench.log" if log_dir else None)
        bar.update(1)
    load_after = os.getloadavg()[0]
    raw = result["rows"]
    label = {str(p): lab for lab, p in files}
    by_name = {Path(p).name: lab for lab, p in files}
    rows: dict[str, dict] = {}
    for t in result["tests"]:
        lab = label.get(t["model_filename"], by_name.get(Path(str(t["model_filename"])).name, t["model_filename"]))
        row = rows.setdefault(lab, {"type": lab, "model_bytes": t["model_size"]})
        test = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
        row[f"{test}_tok_s"] = t["tok_s"]  # the median (lab.model.llama_bench says why)
        row[f"{test}_mean"] = t["tok_s_mean"]
        row[f"{test}_sd"] = t["tok_s_sd"]
        row[f"{test}_samples"] = t["samples_tok_s"] or [t["tok_s_mean"]]
    settings = {"n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "threads": ladder.threads, "flash_attn": "on",
                "cores": os.cpu_count(), "load_avg_before": load_before, "load_avg_after": load_after,
                "build": raw[0].get("build_commit") if raw else None, "cpu": raw[0].get("cpu_info") if raw else None}
    return Speed(list(rows.values()), raw, settings)
