"""Quant quality: how much each ladder file loses against the F16 reference (notebook 03).

`measure_quality`: mean KL divergence, top-1 agreement and perplexity against the reference on the held-out
text (lab/data/heldout.txt), from `llama-perplexity --kl-divergence` (deterministic, so cached like the
ladder, keyed by the files, the text, the arguments and the build); `crosscheck_kld` recomputes the first
chunks independently through llama-cpp-python in every run. The output parsers are pure and tested exactly.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.units import MIB
from lab.core import evidence, facts
from lab.core.disk import check_free_disk
from lab.model import xcheck_logits
from lab.model.quant_formats import DATA, QuantError, gguf_info
from lab.model.quant_ladder import PRODUCT, Ladder, ToolError, cached_tool, progress_bar

HELDOUT = facts.DATA_DIR / "heldout.txt"
# Cross-check tolerances between llama-perplexity and the lab's own computation on the same tokens:
# llama-perplexity stores the base log-probabilities as 16-bit integers over a 16-nat range and skips
# tokens below e^-16 in the KL sum, so the two agree closely but not to the last digit.
XCHECK_KLD_REL = 0.05
XCHECK_KLD_ABS = 0.002
XCHECK_TOP1_PP = 3.0
XCHECK_PPL_REL = 0.02


_NUM = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|-?inf)"
_SUMMARY = {
    "ppl": rf"Mean PPL\(Q\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ppl_base": rf"Mean PPL\(base\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ln_ppl_ratio": rf"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ppl_ratio": rf"Mean PPL\(Q\)/PPL\(base\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "kld": rf"Mean\s+KLD:\s*{_NUM}\s*±\s*{_NUM}",
    "kld_max": rf"Maximum KLD:\s*{_NUM}",
    "kld_p99": rf"99\.0%\s+KLD:\s*{_NUM}",
    "kld_median": rf"Median\s+KLD:\s*{_NUM}",
    "delta_p_mean_pct": rf"Mean\s+Δp:\s*{_NUM}\s*±\s*{_NUM}\s*%",
    "delta_p_rms_pct": rf"RMS Δp\s*:\s*{_NUM}\s*±\s*{_NUM}\s*%",
    "top1_pct": rf"Same top p:\s*{_NUM}\s*±\s*{_NUM}\s*%",
}
_CHUNK = re.compile(rf"^\s*(\d+)\s+{_NUM}\s*±\s*{_NUM}\s+{_NUM}\s*±\s*{_NUM}\s+{_NUM}\s*±\s*{_NUM}\s+"
                    rf"{_NUM}\s*±\s*{_NUM}\s*%\s+{_NUM}\s*±\s*{_NUM}\s*%\s*$", re.M)


def parse_kld_output(text: str) -> dict:
    """The summary statistics llama-perplexity prints after --kl-divergence (means with ± uncertainty)."""
    out: dict[str, Any] = {}
    for key, pattern in _SUMMARY.items():
        m = re.search(pattern, text)
        if not m:
            tail = "\n".join(text.splitlines()[-12:])
            raise ToolError(f"llama-perplexity output has no '{key}' line (pattern {pattern!r}); last lines:\n{tail}")
        out[key] = float(m.group(1))
        if m.lastindex and m.lastindex > 1:
            out[key + "_unc"] = float(m.group(2))
    m = re.search(r"computing over (\d+) chunks, n_ctx=(\d+)", text)
    if m:
        out["chunks"], out["n_ctx"] = int(m.group(1)), int(m.group(2))
    return out


def parse_kld_chunks(text: str) -> list[dict]:
    """The per-chunk running values llama-perplexity prints (cumulative means up to each chunk)."""
    rows = []
    for m in _CHUNK.finditer(text):
        g = [m.group(1)] + [m.group(i) for i in range(2, 12)]
        rows.append({"chunk": int(g[0]), "ppl": float(g[1]), "ln_ppl_ratio": float(g[3]), "kld": float(g[5]),
                     "delta_p_rms_pct": float(g[7]), "top1_pct": float(g[9])})
    return rows


def parse_base_output(text: str) -> dict:
    """PPL and chunk count from the --kl-divergence-base run (the F16 reference's own perplexity)."""
    m = re.search(rf"Final estimate: PPL = {_NUM} \+/- {_NUM}", text)
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", text)
    if not m or not c:
        raise ToolError("llama-perplexity --kl-divergence-base printed no final PPL; last lines:\n"
                        + "\n".join(text.splitlines()[-12:]))
    return {"ppl": float(m.group(1)), "ppl_unc": float(m.group(2)), "chunks": int(c.group(1)), "n_ctx": int(c.group(2))}


@dataclass
class Quality:
    rows: list[dict]
    base: dict
    base_file: Path
    settings: dict
    raw_chunks: dict[str, list[dict]]

    def table(self):
        import pandas as pd

        cols = ["type", "kld", "kld_unc", "kld_median", "kld_p99", "top1_pct", "ppl", "ppl_base", "ppl_ratio",
                "delta_p_rms_pct", "computed"]
        return pd.DataFrame(self.rows)[cols]


def _made_text(made: dict) -> str:
    when = made["computed_utc"].replace("T", " ").rstrip("Z")[:16]
    return f"cached ({when} UTC, {made['seconds']:.0f} s)" if made["reused"] else f"now ({made['seconds']:.0f} s)"


def heldout_text() -> tuple[Path, dict]:
    """The held-out text and its data entry (source, licence)."""
    return HELDOUT, facts.load(DATA, "heldout_text")["heldout_text"][0]


def measure_quality(ladder: Ladder, text: str | Path | None = None, n_ctx: int = 128, batch: int = 512,
                    chunks: int | None = None, include_source: bool = True, log_dir: str | Path | None = None,
                    progress: bool = True) -> Quality:
    """KL divergence, top-1 agreement and perplexity of each file against the F16 reference.

    `llama-perplexity --kl-divergence-base` saves the reference's log-probabilities over the held-out text
    (chunks of `n_ctx` tokens; the second half of each chunk is scored), then `--kl-divergence` runs each
    quantized file over the same tokens. `include_source` adds the shipped file itself (it should be
    ~identical to the reference it was dequantized into). Each tool run is cached (`cached_tool`); a row's
    `computed` says whether it ran now or when it was made."""
    if n_ctx < 16:
        raise QuantError(f"n_ctx must be at least 16, found {n_ctx}")
    text_path = Path(text) if text else HELDOUT
    log_dir = Path(log_dir) / "03_quantize" if log_dir else None
    threads = ladder.threads
    text_sha = evidence.sha256_file(text_path)
    # Flash attention on, as in crosscheck_kld: attention numerics move a fragile file's KLD by ~10 %.
    common = ["-c", str(n_ctx), "-b", str(max(batch, n_ctx)), "-t", str(threads), "-fa", "on"] + \
        (["--chunks", str(chunks)] if chunks else [])
    # llama-perplexity's output is a pure function of the files, the text, these arguments and the build (the same
    # numbers to the last digit in runs at different machine loads), so it is computed once per key and reused; the
    # cross-check (crosscheck_kld) recomputes the first chunks independently in every run.
    key = hashlib.sha256(json.dumps([ladder.reference.sha256, text_sha, common]).encode()).hexdigest()[:12]
    cache = ladder.folder / f"kld-{text_sha[:12]}-c{n_ctx}-n{chunks or 'all'}-{key}"
    base_file = cache / "base-logprobs.bin"
    targets = [(f"shipped {ladder.reference.source_type}", ladder.reference.source, ladder.reference.source_sha256)] \
        if include_source else []
    targets += [(f.qtype, f.path, f.sha256) for f in ladder.files]
    if not base_file.exists():
        # The base file holds n_vocab 16-bit log-probabilities per scored token; English BPE text runs ≥ 2 bytes
        # per token, which bounds the token count from above.
        n_vocab = gguf_info(ladder.reference.path).n_vocab or 256_000
        est_chunks = chunks or max(1, text_path.stat().st_size // 2 // n_ctx)
        check_free_disk(ladder.folder, est_chunks * (n_ctx // 2) * (n_vocab + 4) * 2 + 16 * MIB,
                        "llama-perplexity's base log-probabilities")
    rows, raw = [], {}
    with progress_bar(len(targets) + 1, "llama-perplexity", "run", progress) as bar:
        bar.set_postfix_str("F16 base logits")
        text_out, base_made = cached_tool(
            "llama-perplexity", ["-m", str(ladder.reference.path), "-f", str(text_path), *common,
                                 "--kl-divergence-base", PRODUCT],
            cache / "base.json", log_dir / "llama-perplexity-base.log" if log_dir else None, product=base_file)
        base = parse_base_output(text_out) | {"made": base_made}
        bar.update(1)
        for label, path, sha in targets:
            bar.set_postfix_str(label)
            safe = label.replace(" ", "_")
            out, made = cached_tool(
                "llama-perplexity", ["-m", str(path), *common, "--kl-divergence-base", str(base_file), "--kl-divergence"],
                cache / f"{safe}-{sha[:16]}.json", log_dir / f"llama-perplexity-{safe}.log" if log_dir else None)
            stats = parse_kld_output(out)
            raw[label] = parse_kld_chunks(out)
            rows.append({"type": label, "file": str(path), **stats, "computed": _made_text(made), "made": made})
            bar.update(1)
    settings = {"n_ctx": n_ctx, "batch": max(batch, n_ctx), "threads": threads, "flash_attn": "on", "chunks": base["chunks"],
                "scored_tokens": base["chunks"] * (n_ctx - 1 - n_ctx // 2), "text": str(text_path),
                "text_sha256": text_sha, "cache": str(cache)}
    return Quality(rows, base, base_file, settings, raw)


def read_kld_base(path: str | Path) -> dict:
    """Header and tokens of a --kl-divergence-base file ("_logits_", n_ctx u32, n_vocab i32, n_chunk i32,
    then n_ctx × n_chunk int32 tokens; tools/perplexity/perplexity.cpp kl_divergence)."""
    import numpy as np

    with open(path, "rb") as fh:
        if fh.read(8) != b"_logits_":
            raise ToolError(f"{path}: not a llama-perplexity log-probability file")
        (n_ctx,) = struct.unpack("<I", fh.read(4))
        n_vocab, n_chunk = struct.unpack("<ii", fh.read(8))
        tokens = np.frombuffer(fh.read(4 * n_ctx * n_chunk), dtype=np.int32)
    return {"n_ctx": n_ctx, "n_vocab": n_vocab, "n_chunk": n_chunk, "tokens": tokens}


def kld_stats(base_logits, logits, targets) -> dict:
    """Mean KL(base ‖ q), top-1 agreement and perplexities from two [tokens, vocab] logit arrays (float64)."""
    import numpy as np

    def log_softmax(x):
        x = np.asarray(x, dtype=np.float64)
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    lb, lq = log_softmax(base_logits), log_softmax(logits)
    kld = (np.exp(lb) * (lb - lq)).sum(axis=1)
    idx = np.arange(len(targets))
    return {"kld": float(kld.mean()), "top1_pct": float(100 * (lb.argmax(1) == lq.argmax(1)).mean()),
            "ppl": float(np.exp(-lq[idx, targets].mean())), "ppl_base": float(np.exp(-lb[idx, targets].mean())),
            "tokens": int(len(targets))}


def crosscheck_kld(ladder: Ladder, quality: Quality, n_chunks: int = 2) -> list[dict]:
    """Recompute KLD, top-1 and PPL for the first `n_chunks` chunks with llama-cpp-python (full-vocabulary
    float64 softmax, no 16-bit storage) and compare with llama-perplexity's running values at that chunk.
    Same tokens (read from the base file), same context and flash attention on, as measure_quality. The bindings
    run in a child process (lab.model.xcheck_logits): if they crash, the row says how and the notebook goes on."""
    import numpy as np

    hdr = read_kld_base(quality.base_file)
    n_ctx, first = hdr["n_ctx"], hdr["n_ctx"] // 2
    n_chunks = min(n_chunks, hdr["n_chunk"])
    tokens = hdr["tokens"]
    workdir = Path(quality.base_file).parent / "xcheck"

    def logits_of(path: Path):
        return xcheck_logits.logits(path, tokens[:n_chunks * n_ctx], n_ctx, n_chunks, first, ladder.threads, workdir)

    targets = np.concatenate([tokens[c * n_ctx + first + 1:(c + 1) * n_ctx] for c in range(n_chunks)])
    paths_by_label = {r["type"]: Path(r["file"]) for r in quality.rows}
    try:
        base = logits_of(ladder.reference.path)
    except xcheck_logits.CrosscheckFailed as exc:
        return [{"type": label, "chunks": n_chunks, "agree": None, "error": f"F16 reference: {exc}"}
                for label in paths_by_label]
    rows = []
    for label, path in paths_by_label.items():
        try:
            mine = kld_stats(base, logits_of(path), targets)
        except xcheck_logits.CrosscheckFailed as exc:
            rows.append({"type": label, "chunks": n_chunks, "agree": None, "error": str(exc)})
            continue
        tool = next((r for r in quality.raw_chunks.get(label, []) if r["chunk"] == n_chunks), None)
        row = {"type": label, "chunks": n_chunks, "tokens": mine["tokens"], "lab_kld": mine["kld"],
               "tool_kld": tool and tool["kld"], "lab_top1_pct": mine["top1_pct"], "tool_top1_pct": tool and tool["top1_pct"],
               "lab_ppl": mine["ppl"], "tool_ppl": tool and tool["ppl"]}
        if tool:
            row["kld_diff"] = mine["kld"] - tool["kld"]
            row["top1_diff_pp"] = mine["top1_pct"] - tool["top1_pct"]
            row["ppl_diff_pct"] = 100 * (mine["ppl"] - tool["ppl"]) / tool["ppl"]
            row["agree"] = (abs(row["kld_diff"]) <= max(XCHECK_KLD_ABS, XCHECK_KLD_REL * tool["kld"])
                            and abs(row["top1_diff_pp"]) <= XCHECK_TOP1_PP
                            and abs(row["ppl_diff_pct"]) <= 100 * XCHECK_PPL_REL)
        else:
            row["agree"] = None
        rows.append(row)
    return rows
