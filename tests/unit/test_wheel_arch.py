"""lab.measure.wheel_arch on fixtures built here from the documented layouts: a fatbin (container + entries), an ELF
shared object holding it in .nv_fatbin, and a wheel (zip) holding that. No binary is committed; nothing is downloaded."""
from __future__ import annotations

import struct
import zipfile

import pytest

from lab.measure import wheel_arch

pytestmark = pytest.mark.unit


def _entry(kind: int, arch: int, payload: bytes = b"\0" * 16, compressed: bool = False) -> bytes:
    hsize = 64
    head = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, hsize, len(payload), 0, 0, 0, 8, arch, 0, 0,
                       0x2000 if compressed else 0x11, 0, len(payload))
    return head + payload


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", wheel_arch.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(sections: dict[bytes, bytes]) -> bytes:
    """An ELF64 little-endian file with the given sections and a .shstrtab (no segments: enough for a reader)."""
    names = b"\0" + b"".join(n + b"\0" for n in sections) + b".shstrtab\0"
    data, offsets, pos = b"", [], 64
    for blob in list(sections.values()) + [names]:
        offsets.append(pos + len(data))
        data += blob
    shoff = 64 + len(data)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections) + 2,
                                 len(sections) + 1)
    shdrs = b"\0" * 64
    name_pos = 1
    for i, (name, blob) in enumerate(list(sections.items()) + [(b".shstrtab", names)]):
        shdrs += struct.pack("<IIQQQQIIQQ", name_pos, 1, 0, 0, offsets[i], len(blob), 0, 0, 8, 0)
        name_pos += len(name) + 1
    return header + data + shdrs


def test_parse_fatbin_reads_every_entry_across_containers_and_padding():
    fat = (_container(_entry(2, 70), _entry(2, 80), _entry(1, 80)) + b"\0" * 8
           + _container(_entry(2, 90, compressed=True)))
    got = wheel_arch.parse_fatbin(fat)
    assert [(e.kind, e.arch, e.compressed) for e in got] == [("cubin", 70, False), ("cubin", 80, False),
                                                             ("ptx", 80, False), ("cubin", 90, True)]
    assert [e.name for e in got] == ["sm_70", "sm_80", "compute_80", "sm_90"]


def test_truncated_or_foreign_fatbin_is_refused():
    fat = _container(_entry(2, 70))
    with pytest.raises(wheel_arch.WheelArchError, match="truncated"):
        wheel_arch.parse_fatbin(fat[:-4])
    bad = struct.pack("<IHHQ", wheel_arch.FATBIN_MAGIC, 1, 16, 64) + b"\x07" + b"\0" * 63
    with pytest.raises(wheel_arch.WheelArchError, match="unknown layout"):
        wheel_arch.parse_fatbin(bad)


def test_runs_on_follows_cuda_binary_compatibility():
    volta = wheel_arch.SoArchs("a.so", cubin={70, 80})
    assert volta.runs_on(70) and volta.runs_on(80) and volta.runs_on(86)   # sm_80 cubin runs on 8.6
    newer = wheel_arch.SoArchs("b.so", cubin={75, 80}, ptx={80})
    assert not newer.runs_on(70)                                           # no sm_70 cubin, PTX too new
    assert wheel_arch.SoArchs("c.so", ptx={52}).runs_on(70)                # old PTX is JIT-compiled by the driver


def test_wheel_archs_reads_so_files_inside_a_wheel(tmp_path):
    so_volta = _elf({b".text": b"\0" * 32, b".nv_fatbin": _container(_entry(2, 70), _entry(2, 90), _entry(1, 90))})
    so_new = _elf({b".nv_fatbin": _container(_entry(2, 75), _entry(2, 120))})
    so_cpu = _elf({b".text": b"\0" * 16})
    whl = tmp_path / "demo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("demo/_C.abi3.so", so_volta)
        z.writestr("demo/_new_C.abi3.so", so_new)
        z.writestr("demo/_cpu.so", so_cpu)
        z.writestr("demo/__init__.py", "")
    found = {s.path: s for s in wheel_arch.wheel_archs(whl)}
    assert set(found) == {"demo/_C.abi3.so", "demo/_new_C.abi3.so"}   # the CPU-only .so has no device code
    assert found["demo/_C.abi3.so"].cubin == {70, 90} and found["demo/_C.abi3.so"].ptx == {90}
    tot = wheel_arch.summary(list(found.values()))
    assert tot["cubin"] == [70, 75, 90, 120] and tot["ptx"] == [90]
    assert tot["sm_70_runs"] is False and tot["files_without_sm_70"] == ["demo/_new_C.abi3.so"]
    text = wheel_arch.report(whl)
    assert "demo/_C.abi3.so: cubin sm_70 sm_90; ptx compute_90" in text and "sha256" in text


def test_bad_inputs_say_what_is_wrong(tmp_path):
    with pytest.raises(wheel_arch.WheelArchError, match="no such file"):
        wheel_arch.wheel_archs(tmp_path / "missing.whl")
    (tmp_path / "x.whl").write_text("not a zip")
    with pytest.raises(wheel_arch.WheelArchError, match="not a wheel"):
        wheel_arch.wheel_archs(tmp_path / "x.whl")


def test_cli_verb_prints_the_report_and_refuses_a_bad_path(tmp_path, capsys):
    from lab.__main__ import main

    whl = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("demo/_C.so", _elf({b".nv_fatbin": _container(_entry(2, 70))}))
    assert main(["wheel-arch", str(whl)]) == 0
    assert "demo/_C.so: cubin sm_70; ptx -" in capsys.readouterr().out
    assert main(["wheel-arch", str(tmp_path / "none.whl")]) == 1  # a path that names no wheel: a found problem
    assert "no such file" in capsys.readouterr().err
