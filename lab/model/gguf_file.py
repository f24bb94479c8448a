"""Reading GGUF files without loading them: the one GGUF header reader of the lab (metadata, value types and
the tensor table), the tensor bytes, and why the pinned llama.cpp would refuse a file.

gguf.GGUFReader is exact but turns every vocabulary string into a numpy view: 17 s for Gemma 3's 262K
tokens on a busy 2-core box (and ~12 s for Qwen's 151,936 tokens and 151,387 merges). The lab walks the
header itself (GGUF v2/v3, little-endian; the gguf package's type codes) and skips long arrays by length,
unless the caller asks for some in full (`keep_prefix`: the synthetic writer copies a tokenizer's
`tokenizer.*` arrays). tests/tools/test_models_tools.py checks the result against GGUFReader.
"""
from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lab.core import facts

# GGUFValueType codes (gguf-py constants.py) → struct format; 8 = string, 9 = array
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
_MAX_ARRAY_KEPT = 4096  # per-layer arrays are kept; vocabularies (tokens, scores, merges) are skipped


class GgufError(ValueError):
    """A file is not a GGUF the lab can read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class GgufHeader:
    """What the lab reads from a GGUF: scalar (and short array) metadata and the tensor table."""

    path: str
    metadata: dict
    tensors: tuple[tuple[str, tuple[int, ...], int], ...]  # (name, shape, ggml type)
    array_lengths: dict  # key -> length, for every array (also the skipped ones)
    tensor_offsets: tuple[int, ...] = ()  # each tensor's offset into the data section
    header_bytes: int = 0  # where the header ends (the data section starts at the next alignment)
    keys: tuple[str, ...] = ()  # every metadata key in file order (also the skipped arrays')
    value_types: dict = field(default_factory=dict)  # key -> (GGUF value type, array item type or None)

    @property
    def n_params(self) -> int:
        return sum(math.prod(shape) for _, shape, _ in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(_nbytes(shape, ggml_type) for _, shape, ggml_type in self.tensors)

    @property
    def mtp_tensor_bytes(self) -> int:
        """Bytes of the MTP blocks: blk.<i>.* for i ≥ block_count - nextn_predict_layers (conversion/qwen.py
        _QwenMtpMixin stores them after the trunk). llama.cpp skips them unless --spec-type draft-mtp
        (src/models/qwen35.cpp load_arch_tensors: TENSOR_SKIP; src/llama-model-loader.cpp "model has unused
        tensor ... -- ignoring")."""
        arch = self.metadata.get("general.architecture")
        n_mtp = int(self.metadata.get(f"{arch}.nextn_predict_layers") or 0)
        if not n_mtp:
            return 0
        first = int(self.metadata[f"{arch}.block_count"]) - n_mtp
        return sum(_nbytes(shape, ggml_type) for name, shape, ggml_type in self.tensors
                   if name.startswith("blk.") and int(name.split(".")[1]) >= first)


def _nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    return math.prod(shape) // block * size


def read_gguf_header(path: str | Path, keep_prefix: str | None = None) -> GgufHeader:
    """Parse a GGUF file's metadata and tensor table (no tensor data is read). Arrays longer than
    _MAX_ARRAY_KEPT are skipped (their lengths kept) unless their key starts with `keep_prefix`."""
    path = Path(path)
    try:
        stat = path.stat()
        return _read_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns, keep_prefix)
    except OSError as exc:
        raise GgufError(f"{path}: cannot read GGUF file: {exc}") from exc
    except (struct.error, OverflowError) as exc:  # a length or offset past the end of the file
        raise GgufError(f"{path}: the GGUF header is cut short or corrupt ({stat.st_size:,} bytes): an interrupted "
                        "download; fetch the file again and compare its sha256 with the publisher's") from exc


@lru_cache(maxsize=16)
def _read_cached(path: str, size: int, mtime_ns: int, keep_prefix: str | None) -> GgufHeader:
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if size < 24 or buf[:4] != b"GGUF":
            raise GgufError(f"{path}: not a GGUF file (bad magic)")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise GgufError(f"{path}: GGUF version {version} not supported (2 or 3; big-endian files neither)")
        off = 24

        def string(off: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", buf, off)
            return bytes(buf[off + 8: off + 8 + n]).decode("utf-8", "replace"), off + 8 + n

        def value(vtype: int, off: int, keep: bool = True):
            if vtype == STRING:
                if keep:
                    return string(off)
                (n,) = struct.unpack_from("<Q", buf, off)
                return None, off + 8 + n
            if vtype in SCALAR_FORMATS:
                fmt = SCALAR_FORMATS[vtype]
                return struct.unpack_from(fmt, buf, off)[0], off + struct.calcsize(fmt)
            raise GgufError(f"{path}: unknown GGUF value type {vtype} at byte {off}")

        metadata, lengths, keys, types = {}, {}, [], {}
        for _ in range(n_kv):
            key, off = string(off)
            keys.append(key)
            (vtype,) = struct.unpack_from("<I", buf, off)
            off += 4
            if vtype != ARRAY:
                types[key] = (vtype, None)
                metadata[key], off = value(vtype, off)
                continue
            itype, count = struct.unpack_from("<IQ", buf, off)
            off += 12
            types[key], lengths[key] = (vtype, itype), count
            if itype == ARRAY:
                raise GgufError(f"{path}: {key} is a nested array; not supported")
            keep = count <= _MAX_ARRAY_KEPT or bool(keep_prefix and key.startswith(keep_prefix))
            if itype in SCALAR_FORMATS:
                fmt = SCALAR_FORMATS[itype]
                if keep:  # fixed-size items in one step
                    metadata[key] = list(struct.unpack_from(f"<{count}{fmt[1:]}", buf, off))
                off += count * struct.calcsize(fmt)
                continue
            items = []
            for _ in range(count):
                item, off = value(itype, off, keep)
                items.append(item)
            if keep:
                metadata[key] = items
        tensors, offsets = [], []
        for _ in range(n_tensors):
            name, off = string(off)
            (n_dims,) = struct.unpack_from("<I", buf, off)
            dims = struct.unpack_from(f"<{n_dims}Q", buf, off + 4)
            ggml_type, offset = struct.unpack_from("<IQ", buf, off + 4 + 8 * n_dims)
            off += 4 + 8 * n_dims + 12
            tensors.append((name, tuple(int(d) for d in dims), int(ggml_type)))
            offsets.append(int(offset))
    return GgufHeader(path, metadata, tuple(tensors), lengths, tuple(offsets), off, tuple(keys), types)


def gguf_problem(path: str | Path) -> str | None:
    """Why the pinned llama.cpp would refuse this file, or None: missing, not a regular file, empty, not GGUF,
    a header or tensor data cut short (an interrupted download), an architecture or tensor type it does not
    know (lab/data/llama_cpp_gguf.yaml, taken from its source). Reads the header only."""

    p = Path(path)
    try:
        info = p.stat()
    except OSError as exc:
        return f"{p}: {exc.strerror or exc}"
    if not p.is_file():
        return f"{p}: not a regular file"
    if info.st_size == 0:
        return f"{p}: empty file (0 bytes): an interrupted download or copy; fetch it again"
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        return f"{p}: not a GGUF file (starts with {magic!r}, not b'GGUF'); llama.cpp loads .gguf files only"
    try:
        header = read_gguf_header(p)
    except GgufError as exc:
        return str(exc)
    except (ValueError, MemoryError):
        return (f"{p}: the GGUF header is cut short or corrupt ({info.st_size:,} bytes): an interrupted "
                "download; fetch the file again and compare its sha256 with the publisher's")
    known = facts.load("llama_cpp_gguf")
    arch = header.metadata.get("general.architecture")
    if arch not in known["architectures"]:
        return (f"{p}: architecture {arch!r} is not one the pinned llama.cpp (llama-cpp-python "
                f"{known['llama_cpp_python']}) knows; a newer llama.cpp may, or the file is not a language model")
    removed = {int(k): v for k, v in known["removed_ggml_types"].items()}
    for (name, _shape, ggml_type) in header.tensors:
        if ggml_type >= known["ggml_type_count"] or ggml_type in removed:
            what = f"removed type {removed[ggml_type]}" if ggml_type in removed else "an unknown type"
            return (f"{p}: tensor {name!r} has ggml type {ggml_type} ({what}); llama.cpp "
                    f"{known['llama_cpp_python']} cannot load it: re-quantize with a current llama-quantize")
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    align = int(header.metadata.get("general.alignment", known["default_alignment"]))
    data_start = -(-header.header_bytes // align) * align
    need = data_start
    for (name, shape, ggml_type), offset in zip(header.tensors, header.tensor_offsets):
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            return f"{p}: tensor {name!r} has ggml type {ggml_type}, unknown to the gguf package"
        need = max(need, data_start + offset + math.prod(shape) // block * size)
    if info.st_size < need:
        return (f"{p}: truncated: {info.st_size:,} bytes, but its tensors need {need:,}: an interrupted "
                "download; fetch the file again and compare its sha256 with the publisher's")
    return None


def gguf_weights_bytes(path: str | Path, with_mtp: bool = False) -> int:
    """Bytes of tensor data in a GGUF file that llama.cpp loads as weights (excludes the header): every tensor
    but the MTP blocks, which it loads only for --spec-type draft-mtp (`with_mtp`); see mtp_tensor_bytes."""
    header = read_gguf_header(path)
    return header.tensor_bytes - (0 if with_mtp else header.mtp_tensor_bytes)

