"""Which CUDA architectures a wheel's compiled code carries, read from the files themselves (standard library only).

A CUDA extension (.so) keeps its device code in the ELF section `.nv_fatbin`: one or more fatbin containers, each a
16-byte header (magic 0xBA55ED50, version, header size, payload size) followed by entries, one per embedded cubin
(SASS for one sm_XX: runs only on that architecture's family) or PTX (virtual code that the driver JIT-compiles for
its own or a newer GPU). Each entry header names its kind and its architecture (layout below, as `cuobjdump
--list-elf/--list-ptx` and open-source fatbin readers read it). `wheel_archs(path)` opens a wheel (a zip), scans every
.so inside, and returns the architectures per file: what a "no kernel image is available for execution on the
device" error is about, without installing the wheel or needing the GPU. `.venv/bin/python -m lab wheel-arch WHEEL` prints it.

Entry header (little-endian), offsets in bytes:
  0 u16 kind (1 = PTX, 2 = ELF cubin)   2 u16 version   4 u32 header size   8 u64 payload size (padded)
 16 u32 compressed size   20 u32 (unused here)   24 u16 minor   26 u16 major (PTX ISA / cubin version)
 28 u32 arch (70 = sm_70)   32 u32 name offset   36 u32 name length   40 u64 flags (0x2000: compressed payload)
 48 u64 zero   56 u64 uncompressed size.
The next entry starts at entry start + header size + payload size; containers follow each other, 8-byte aligned.
"""
from __future__ import annotations

import hashlib
import shutil
import struct
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "cubin"}
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # through flags: 48 bytes
_CONTAINER = struct.Struct("<IHHQ")      # magic, version, header size, payload size: 16 bytes


class WheelArchError(ValueError):
    """A file that is not what the reader needs (not an ELF, a truncated fatbin, not a zip); says which."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str        # "cubin" or "ptx"
    arch: int        # 70 for sm_70
    compressed: bool

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'cubin' else 'compute'}_{self.arch}"


@dataclass
class SoArchs:
    """The architectures one shared object carries (an empty set: no device code at all)."""

    path: str
    cubin: set[int] = field(default_factory=set)
    ptx: set[int] = field(default_factory=set)
    entries: int = 0

    def runs_on(self, cc10: int) -> bool:
        """Can a GPU of compute capability `cc10` (70 for 7.0) run this file's kernels? A cubin of the same major
        version and no newer minor runs (sm_70 runs on 7.0 only: Volta's family has one member), or PTX of an
        architecture ≤ the GPU's, which the driver compiles at load time."""
        return (any(a // 10 == cc10 // 10 and a <= cc10 for a in self.cubin)
                or any(a <= cc10 for a in self.ptx))

    def to_dict(self) -> dict:
        return {"path": self.path, "cubin": sorted(self.cubin), "ptx": sorted(self.ptx), "entries": self.entries}


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    """Every entry of the fatbin containers in `data` (the bytes of an .nv_fatbin section, or a .fatbin file)."""
    out: list[FatbinEntry] = []
    pos = 0
    while pos + _CONTAINER.size <= len(data):
        magic, _version, hsize, fat_size = _CONTAINER.unpack_from(data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # padding between containers (8-byte alignment)
            continue
        start, end = pos + hsize, pos + hsize + fat_size
        if end > len(data):
            raise WheelArchError(f"fatbin container at byte {pos} says {fat_size} bytes follow, only "
                                 f"{len(data) - start} do: truncated")
        e = start
        while e + _ENTRY.size <= end:
            kind, _v, ehsize, size, _csize, _u, _minor, _major, arch, _no, _nl, flags = _ENTRY.unpack_from(data, e)
            if ehsize < _ENTRY.size or kind not in KINDS:
                raise WheelArchError(f"fatbin entry at byte {e}: kind {kind}, header size {ehsize}: not a fatbin "
                                     "entry (unknown layout)")
            out.append(FatbinEntry(KINDS[kind], arch, bool(flags & 0x2000)))
            e += ehsize + size
        pos = end
    return out


def _elf_section(f, name: bytes) -> tuple[int, int] | None:
    """(offset, size) of section `name` of the ELF64 little-endian file `f`, or None if it has none."""
    f.seek(0)
    ident = f.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF":
        raise WheelArchError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise WheelArchError("not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    headers = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    f.seek(str_off)
    names = f.read(str_size)
    for sh_name, _type, _flags, _addr, off, size in headers:
        if names[sh_name:names.index(b"\0", sh_name)] == name:
            return off, size
    return None


def so_archs(path: str | Path, label: str | None = None) -> SoArchs:
    """The architectures in one ELF shared object (its .nv_fatbin section)."""
    res = SoArchs(label or str(path))
    with open(path, "rb") as f:
        sec = _elf_section(f, b".nv_fatbin")
        if sec is None:
            return res
        f.seek(sec[0])
        entries = parse_fatbin(f.read(sec[1]))
    res.entries = len(entries)
    for e in entries:
        (res.cubin if e.kind == "cubin" else res.ptx).add(e.arch)
    return res


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_archs(path: str | Path) -> list[SoArchs]:
    """Every .so in the wheel at `path` that carries device code, with its architectures (each .so is copied to a
    temporary file one at a time: a wheel's members are compressed, the section table needs seeking)."""
    p = Path(path)
    if not p.is_file():
        raise WheelArchError(f"{p}: no such file (download one: pip download --no-deps --only-binary=:all: ...)")
    try:
        zf = zipfile.ZipFile(p)
    except zipfile.BadZipFile as exc:
        raise WheelArchError(f"{p}: not a wheel (zip): {exc}") from exc
    out = []
    with zf, tempfile.TemporaryDirectory(prefix="wheel-arch-") as tmp:
        for info in zf.infolist():
            if not (info.filename.endswith(".so") or ".so." in info.filename):
                continue
            dest = Path(tmp) / "member.so"
            with zf.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            try:
                found = so_archs(dest, info.filename)
            except WheelArchError:
                continue  # a linker script or non-ELF named .so
            if found.entries:
                out.append(found)
    return out


def summary(found: list[SoArchs]) -> dict:
    """The union over the files: cubin and PTX architectures, and per compute capability of interest whether every
    file with device code can run there."""
    cubin = sorted(set().union(*(s.cubin for s in found))) if found else []
    ptx = sorted(set().union(*(s.ptx for s in found))) if found else []
    return {"cubin": cubin, "ptx": ptx, "files": len(found),
            "sm_70_runs": all(s.runs_on(70) for s in found) if found else None,
            "files_without_sm_70": [s.path for s in found if not s.runs_on(70)]}


def report(path: str | Path) -> str:
    """What `.venv/bin/python -m lab wheel-arch` prints: one line per file, then the union."""
    found = wheel_archs(path)
    lines = [f"{Path(path).name} (sha256 {sha256(path)})"]
    for s in found:
        lines.append(f"  {s.path}: cubin {' '.join(f'sm_{a}' for a in sorted(s.cubin)) or '-'}; "
                     f"ptx {' '.join(f'compute_{a}' for a in sorted(s.ptx)) or '-'}")
    tot = summary(found)
    lines.append(f"  all {tot['files']} files with device code: cubin {tot['cubin']}, ptx {tot['ptx']}; "
                 f"runs on compute capability 7.0 (V100): {tot['sm_70_runs']}")
    return "\n".join(lines)


__all__ = ["FATBIN_MAGIC", "WheelArchError", "FatbinEntry", "SoArchs", "parse_fatbin", "so_archs", "wheel_archs",
           "summary", "report", "sha256"]
