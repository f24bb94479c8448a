"""Synthetic random-weight GGUF files of a real architecture's shape, for speed and memory tests.

A 27B-class model is 15-20 GB to download; its *speed* depends only on its shape and quant type, not on
its weights (decode reads every weight once per token whatever the values are). So the lab writes a
llama-architecture GGUF with a stand-in's dimensions (e.g. Qwen3-32B: 64 layers, n_embd 5120, n_ff 25600,
64 heads, 8 KV heads, head_dim 128, vocab 151936), every matrix in Q4_K (or Q8_0) with random but valid
blocks, RMSNorm weights F32 ones, and a real vocabulary + chat template copied from one of llama.cpp's
tokenizer-only GGUFs (`models/ggml-vocab-qwen2.gguf` in the llama-cpp-python sdist). The file says what
it is (`lab.synthetic` = true and a note): its text is garbage, its tok/s and memory use are the model's.

What a llama-architecture file cannot express, and so is refused or noted: MoE experts are refused; a
sliding window is dropped (every layer global, noted in the metadata); Qwen3's per-head q/k RMSNorm
(2 x head_dim weights per layer, 0.00005 % of the model) is left out, so a Qwen3-32B-shaped file has
32,761,446,400 parameters in its matrices.

A Qwen3.5-family hybrid (Gated DeltaNet + gated full attention: Qwen3.8-27B, Qwen3.5-27B) is written as
llama.cpp's own `qwen35` architecture instead, with the exact tensor names, shapes and types its loader
asks for (src/models/qwen35.cpp load_arch_tensors; names from src/llama-arch.cpp) and the metadata it
reads (qwen35.ssm.*, full_attention_interval, rope.dimension_sections): matrices Q4_K/Q8_0, the conv
kernel, the decay A, dt bias and norms F32 (ggml_ssm_conv and the element-wise ops take F32), and the
tokenizer of llama.cpp's models/ggml-vocab-qwen35.gguf padded to the model's 248,320 embedding rows.
The multi-token-prediction (MTP) block of the real model is written too when its config has one (Qwen3.8-27B:
mtp_num_hidden_layers 1, so blk.64 after the 64 trunk layers and qwen35.nextn_predict_layers = 1, as a converted
GGUF carries it); `--mtp 0` leaves it out. llama.cpp skips those tensors ("model has unused tensor ... --
ignoring") unless llama-server runs `--spec-type draft-mtp`, which drafts with them
(lab.model.synth_shapes.mtp_block has the tensor list and its sources).

The file streams out one tensor at a time (the largest, Qwen3's token_embd, is 438 MB of Q4_K), after a
free-disk check; `predict_bytes` gives its exact size beforehand from the GGUF layout alone. The shapes and
tensor lists are lab.model.synth_shapes', the metadata and tokenizer lab.model.synth_metadata's; this module
sizes, fills and writes the file.

    .venv/bin/python -m lab synth --arch qwen3-32b --out /data/qwen3-32b-synthetic-Q4_K.gguf [--layers N]
    .venv/bin/python -m lab synth --arch qwen3.8-27b --out /data/qwen3.8-27b-synthetic-Q4_K.gguf [--layers 4] [--mtp 0]
"""
from __future__ import annotations

import argparse
import math
import struct
import sys
from pathlib import Path

from lab.core import disk, paths
from lab.core.units import GIB, MIB
from lab.model import gguf_file, models
from lab.model.models import ArchSpec
from lab.model.synth_metadata import (DEFAULT_VOCAB, KV, QWEN35_VOCAB, SYNTHETIC_NOTE, default_vocab_path, model_kvs,
                                      pad_vocab, vocab_kvs, vocab_name_for)
from lab.model.synth_shapes import F32, QUANTS, SynthError, TensorPlan, gguf_arch, tensor_plan

GGUF_ALIGNMENT = 32  # GGUF's default data alignment (gguf-py constants GGUF_DEFAULT_ALIGNMENT)
DISK_MARGIN_BYTES = 256 * MIB  # leave this much free after writing


# ---------------------------------------------------------------- exact size, from the GGUF layout alone
_SCALAR_BYTES = {vtype: struct.calcsize(fmt) for vtype, fmt in gguf_file.SCALAR_FORMATS.items()}


def _pad(n: int, align: int = GGUF_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


def _value_bytes(value, vtype: int, sub_type: int | None) -> int:
    if vtype == gguf_file.STRING:
        return 8 + len(value.encode("utf-8") if isinstance(value, str) else value)
    if vtype == gguf_file.ARRAY:
        if sub_type == gguf_file.STRING:
            return 4 + 8 + sum(8 + len(s.encode("utf-8") if isinstance(s, str) else s) for s in value)
        return 4 + 8 + len(value) * _SCALAR_BYTES[sub_type]
    return _SCALAR_BYTES[vtype]


def predict_bytes(kvs: list[KV], plan: list[TensorPlan]) -> dict:
    """Exact file size (GGUF v3): header + metadata + tensor table, padded to the alignment, then every
    tensor's data padded to the alignment. `tensor_bytes` is every tensor of the file (llama-bench's model
    size: the loader counts them all, src/llama-model-loader.cpp); `mtp_bytes` / `mtp_params` the MTP block's
    share, which llama.cpp leaves unloaded (and decode unread) without --spec-type draft-mtp."""
    header = 4 + 4 + 8 + 8  # magic, version, tensor count, metadata count
    meta = sum(8 + len(kv.key.encode()) + 4 + _value_bytes(kv.value, kv.vtype, kv.sub_type) for kv in kvs)
    table = sum(8 + len(t.name.encode()) + 4 + 8 * len(t.ne) + 4 + 8 for t in plan)
    data_offset = _pad(header + meta + table)
    data = sum(_pad(t.nbytes) for t in plan)
    return {"header_bytes": data_offset, "tensor_bytes": sum(t.nbytes for t in plan), "total_bytes": data_offset + data,
            "params": sum(t.n_elements for t in plan),
            "matrix_params": sum(t.n_elements for t in plan if t.layout is not F32),
            "mtp_bytes": sum(t.nbytes for t in plan if t.mtp), "mtp_params": sum(t.n_elements for t in plan if t.mtp)}


# ---------------------------------------------------------------- random but valid blocks
def weight_std(n_in: int) -> float:
    """Target standard deviation of a matrix's weights: 1/sqrt(row length), so a random matrix keeps the
    activations' scale (LeCun); RMSNorm before every block keeps the residual stream bounded anyway."""
    return 1.0 / math.sqrt(n_in)


def _q4_k_blocks(rng, n_blocks: int, n_in: int):
    """Random Q4_K blocks. Per 32-weight sub-block: scale sc in 4..8, min m = round(7.5 x sc), d = dmin, so
    w = d*sc*q - dmin*m has mean ~0 over q uniform in 0..15 (the nibbles' mean is 7.5) and sd = d*sc*4.61."""
    import numpy as np

    blocks = rng.bit_generator.random_raw(n_blocks * 18).view(np.uint8).reshape(n_blocks, 144)  # qs: random nibbles
    sc = rng.integers(4, 9, size=(n_blocks, 8), dtype=np.uint8)
    m = np.rint(sc * 7.5).astype(np.uint8)  # <= 60, fits 6 bits
    d = (weight_std(n_in) / (6.0 * math.sqrt(255 / 12))) * rng.uniform(0.8, 1.2, size=n_blocks)
    d16 = d.astype(np.float16)
    blocks[:, 0:2] = d16.view(np.uint8).reshape(n_blocks, 2)
    blocks[:, 2:4] = d16.view(np.uint8).reshape(n_blocks, 2)  # dmin = d
    # 12 scale bytes, ggml-quants.c get_scale_min_k4 in reverse: bytes 0-3 sc[0..3] (+ high bits of sc[4..7]),
    # bytes 4-7 m[0..3] (+ high bits of m[4..7]), bytes 8-11 low nibbles of sc[4..7] | m[4..7] << 4.
    blocks[:, 4:8] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    blocks[:, 8:12] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    blocks[:, 12:16] = (sc[:, 4:] & 0xF) | ((m[:, 4:] & 0xF) << 4)
    return blocks


def _q8_0_blocks(rng, n_blocks: int, n_in: int):
    """Random Q8_0 blocks: int8 uniform over -128..127 (sd 73.9), d = target sd / 73.9."""
    import numpy as np

    blocks = np.empty((n_blocks, 34), dtype=np.uint8)
    raw = rng.bit_generator.random_raw(n_blocks * 4).view(np.uint8).reshape(n_blocks, 32)
    blocks[:, 2:] = raw
    d = (weight_std(n_in) / 73.9 * rng.uniform(0.8, 1.2, size=n_blocks)).astype(np.float16)
    blocks[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


_BLOCK_MAKERS = {"Q4_K": _q4_k_blocks, "Q8_0": _q8_0_blocks}


def tensor_data(t: TensorPlan, rng):
    """The raw bytes of one tensor (numpy uint8 of t.byte_shape): norms are ones, matrices random blocks."""
    import numpy as np

    if t.layout is F32:
        return np.full(t.ne[::-1], t.fill, dtype=np.float32)
    n_blocks = t.n_elements // t.layout.block_weights
    return _BLOCK_MAKERS[t.layout.name](rng, n_blocks, t.ne[0]).reshape(t.byte_shape)


# ---------------------------------------------------------------- writing
def _resolve_arch(arch_id_or_spec: str | ArchSpec) -> ArchSpec:
    if isinstance(arch_id_or_spec, ArchSpec):
        return arch_id_or_spec
    try:
        return models.stand_in(arch_id_or_spec)
    except KeyError as exc:
        raise SynthError(str(exc.args[0])) from exc


def plan_file(arch_id_or_spec: str | ArchSpec, quant: str = "Q4_K", vocab_gguf: str | Path | None = None,
              layers: int | None = None, seed: int = 0,
              mtp: int | None = None) -> tuple[ArchSpec, list[KV], list[TensorPlan], dict]:
    """Everything `synthesize` will write, and its exact size, without writing: (arch, metadata, tensors, sizes).
    `mtp`: MTP blocks to write (None: the real model's, arch.mtp_layers)."""
    arch = _resolve_arch(arch_id_or_spec)
    vocab = Path(vocab_gguf) if vocab_gguf else default_vocab_path(vocab_name_for(arch))
    plan = tensor_plan(arch, quant, layers, mtp)
    kvs = model_kvs(arch, quant, seed, layers, vocab.name, mtp) + pad_vocab(vocab_kvs(vocab), arch.vocab_size, str(vocab))
    return arch, kvs, plan, predict_bytes(kvs, plan)


def synthesize(arch_id_or_spec: str | ArchSpec, out_path: str | Path, quant: str = "Q4_K",
               vocab_gguf: str | Path | None = None, layers: int | None = None, seed: int = 0,
               progress: bool = True, mtp: int | None = None) -> Path:
    """Write a random-weight GGUF of `arch_id_or_spec`'s shape (a stand-in id such as "qwen3-32b", or an
    ArchSpec) to `out_path`; `layers` overrides the layer count (a quick smaller file). Returns the path.

    The file is written to `<out>.partial` and renamed at the end, so a half-written file never looks done.
    Raises SynthError for a shape llama cannot express or an unknown quant, lab.core.disk.DiskSpaceError for
    too little disk."""
    arch, kvs, plan, size = plan_file(arch_id_or_spec, quant, vocab_gguf, layers, seed, mtp)
    return write_file(out_path, arch, kvs, plan, size, seed, progress)


def write_file(out_path: str | Path, arch: ArchSpec, kvs: list[KV], plan: list[TensorPlan], size: dict,
               seed: int = 0, progress: bool = True) -> Path:
    """Write what `plan_file` planned (disk checked first, one tensor in memory at a time)."""
    import gguf
    import numpy as np
    from tqdm import tqdm

    out = Path(out_path)
    disk.check_free_disk(out.parent, size["total_bytes"] + DISK_MARGIN_BYTES,
                         f"{out.name} ({size['total_bytes'] / GIB:.2f} GiB, and {DISK_MARGIN_BYTES // MIB} MiB left free after it)",
                         fix="Free some space, or choose another --out (or LAB_CACHE for the lab's cache).",
                         replacing=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), gguf_arch(arch))
    for kv in kvs:
        if kv.key != "general.architecture":
            writer.add_key_value(kv.key, kv.value, gguf.GGUFValueType(kv.vtype),
                                 gguf.GGUFValueType(kv.sub_type) if kv.sub_type is not None else None)
    for t in plan:
        if t.layout is F32:
            writer.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float32), t.nbytes)
        else:
            writer.add_tensor_info(t.name, t.byte_shape, np.dtype(np.uint8), t.nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType(t.layout.ggml_type))
    rng = np.random.Generator(np.random.PCG64(seed))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        with tqdm(total=size["tensor_bytes"], unit="B", unit_scale=True, disable=not progress,
                  desc=f"synth {arch.name}") as bar:
            for t in plan:
                writer.write_tensor_data(tensor_data(t, rng))
                bar.update(t.nbytes)
        writer.close()
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    written = tmp.stat().st_size
    if written != size["total_bytes"]:
        tmp.unlink(missing_ok=True)
        raise SynthError(f"{out}: wrote {written} bytes, predicted {size['total_bytes']} (a bug in lab.model.synth)")
    tmp.replace(out)
    return out


def cached_file(arch_id: str, layers: int | None = None, quant: str = "Q4_K", seed: int = 0,
                progress: bool = False, mtp: int | None = None) -> Path:
    """A synthetic file kept in the lab's cache (~/.cache/llm-lab/synth/), written once: reused while its size
    is the predicted one. Notebook 05's parity grid uses Qwen3.8-27B at 4 layers + its MTP block (2.5 GB, ~10 s
    to write when the disk is idle). A file with MTP blocks is named so (-mtp1), apart from one without."""
    path, planned = cached_path(arch_id, layers, quant, seed, mtp)
    return ensure_written(path, planned, seed, progress)


def ensure_written(path: Path, planned: tuple, seed: int = 0, progress: bool = False) -> Path:
    """`path` as `planned` (plan_file's answer): kept while its size is the predicted one, else written."""
    arch, kvs, plan, size = planned
    if path.exists() and path.stat().st_size == size["total_bytes"]:
        return path
    return write_file(path, arch, kvs, plan, size, seed, progress)


def cached_path(arch_id: str, layers: int | None = None, quant: str = "Q4_K", seed: int = 0,
                mtp: int | None = None) -> tuple[Path, tuple]:
    """Where cached_file keeps that file, and its plan_file (nothing written): `lab cache` asks it which
    synthetic files the lab still uses."""
    planned = plan_file(arch_id, quant, None, layers, seed, mtp)
    arch, _kvs, plan, _size = planned
    n_mtp = sum(1 for t in plan if t.mtp and t.name.endswith(".nextn.eh_proj.weight"))
    name = f"{arch_id}-{layers or arch.n_layers}L{f'-mtp{n_mtp}' if n_mtp else ''}-{quant}-seed{seed}.gguf"
    return paths.cache_dir() / "synth" / name, planned


def describe(arch: ArchSpec, plan: list[TensorPlan], size: dict, quant: str) -> str:
    n_attn = sum(1 for t in plan if t.name.endswith("attn_q.weight"))
    n_linear = sum(1 for t in plan if t.name.endswith("ssm_out.weight"))
    n_mtp = sum(1 for t in plan if t.name.endswith("nextn.eh_proj.weight"))
    n_attn -= n_mtp  # an MTP block has its own attn_q
    layers = f"{n_attn + n_linear} layers ({n_attn} full attention, {n_linear} Gated DeltaNet)" if n_linear \
        else f"{n_attn} layers"
    if n_mtp:
        layers += (f" + {n_mtp} MTP block ({size['mtp_bytes'] / 2**30:.2f} GiB, loaded only for "
                   "--spec-type draft-mtp)")
    return (f"{arch.name} shape as {gguf_arch(arch)}: {layers}, "
            f"n_embd {arch.hidden_size}, n_ff {arch.ffn_size}, {arch.n_heads} heads / {arch.n_kv_heads} KV heads "
            f"x {arch.head_dim_k}, vocab {arch.vocab_size}; {quant}: {size['params'] / 1e9:.3f} B params, "
            f"{size['tensor_bytes'] / 2**30:.2f} GiB of weights, file {size['total_bytes']} bytes")


# ---------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    from lab.core import cli

    ap = cli.parser(".venv/bin/python -m lab synth", "Write a random-weight GGUF of a real model's shape (speed and memory "
                    "tests only: its text is garbage).",
                    ".venv/bin/python -m lab synth --arch qwen3.8-27b --out models/q27-synth.gguf",
                    ".venv/bin/python -m lab synth --arch qwen3.8-27b --layers 4 --out /tmp/q4l.gguf",
                    ".venv/bin/python -m lab synth --arch gemma-3-27b --out x.gguf --dry-run")
    ap.add_argument("--arch", required=True, help=f"stand-in id: {', '.join(models.stand_in_ids())}")
    ap.add_argument("--out", required=True, help="the GGUF file to write")
    ap.add_argument("--layers", type=int, default=None,
                    help="override the layer count (a smaller, quicker file; for the hybrid a multiple of 4 keeps "
                         "the 3 Gated DeltaNet : 1 full attention pattern)")
    ap.add_argument("--quant", default="Q4_K", choices=sorted(QUANTS), help="matrix type (default Q4_K)")
    ap.add_argument("--vocab", default=None, help=f"tokenizer GGUF to copy (default llama.cpp's {DEFAULT_VOCAB}; "
                                                   f"{QWEN35_VOCAB} for the Qwen3.5 hybrid)")
    ap.add_argument("--mtp", type=int, default=None, choices=(0, 1),
                    help="MTP (multi-token prediction) blocks after the trunk, for llama-server --spec-type draft-mtp "
                         "(default: the real model's: 1 for qwen3.8-27b, 0 where the config has none)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--dry-run", action="store_true", help="print the shape and exact size, write nothing")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def main(argv: list[str] | None = None) -> int:
    """`.venv/bin/python -m lab synth`: 0 written, 1 no room on the disk, 2 bad usage (unknown arch or quant, bad shape)."""
    args = build_parser().parse_args(argv)
    try:
        arch, kvs, plan, size = plan_file(args.arch, args.quant, args.vocab, args.layers, args.seed, args.mtp)
    except (SynthError, models.ModelConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(arch, plan, size, args.quant))
    if args.dry_run:
        return 0
    try:
        path = write_file(args.out, arch, kvs, plan, size, args.seed, progress=not args.no_progress)
    except disk.DiskSpaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size} bytes; {SYNTHETIC_NOTE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
