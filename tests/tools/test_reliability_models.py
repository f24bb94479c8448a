"""Bad model files: truncated, zero-length, not GGUF, an architecture the pinned llama.cpp does not know, a
tensor type it removed. Each is refused with a clear error before llama-server is asked to load it (nothing
started, nothing left), and llama-server's own error on the same file is recognised by `lab doctor`. The
model's sha256 is in the manifest, and a changed file is noticed on the next run of the profile.
Figures: files tried / refused before loading; llama.cpp errors tried / recognised."""
import json
import shutil
import struct
import subprocess
from pathlib import Path

import psutil
import pytest

from conftest import cmdline, record_figure
from lab.core import paths, profiles
from lab.model import gguf_file
from lab.serving import engines, serve
from lab.diagnose import troubleshoot
from lab.records import manifest

pytestmark = pytest.mark.tools




def tiny_gguf(arch: str, ggml_type: int, row_bytes: int = 18) -> bytes:
    """A minimal GGUF v3: general.architecture and one 32-element tensor of `ggml_type` (written by hand,
    because the gguf package refuses types llama.cpp removed)."""
    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    head += string("general.architecture") + struct.pack("<I", 8) + string(arch)
    head += string("w") + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<IQ", ggml_type, 0)
    head += b"\0" * (-len(head) % 32)
    return head + b"\1" * row_bytes


def bad_files(tmp_path: Path, real: Path) -> dict[str, tuple[Path, str]]:
    """kind -> (file, what the refusal must say)"""
    data = real.read_bytes()
    files = {"truncated (half the file)": (data[: len(data) // 2], "truncated"),
             "truncated inside the header": (data[:300], "cut short"),
             "zero-length": (b"", "empty file"),
             "not GGUF (an HTML error page)": (b"<!DOCTYPE html><html>404 Not Found</html>\n" * 40, "not a GGUF file"),
             "wrong architecture": (tiny_gguf("notanarch", 0, 128), "architecture 'notanarch'"),
             "unsupported quant (removed Q4_0_4_4)": (tiny_gguf("llama", 31), "removed type Q4_0_4_4"),
             "unknown quant type id": (tiny_gguf("llama", 99), "unknown type")}
    out = {}
    for i, (kind, (content, needle)) in enumerate(files.items()):
        path = tmp_path / f"bad{i}.gguf"
        path.write_bytes(content)
        out[kind] = (path, needle)
    return out


def children_loading(model: Path) -> set[int]:
    """This test process's children whose command line names `model`."""
    return {child.pid for child in psutil.Process().children(recursive=True) if str(model) in cmdline(child.pid)}


def test_bad_model_files_are_refused_before_llama_cpp_loads_them(smol_model, tmp_path):
    assert gguf_file.gguf_problem(smol_model) is None  # the real one passes
    files = bad_files(tmp_path, smol_model)
    refused, recognised, problems = 0, 0, []
    for kind, (path, needle) in files.items():
        problem = gguf_file.gguf_problem(path)
        cmd = engines.build_command(profiles.load("cpu-default"), port=serve.free_port(), model_path=path)
        try:
            serve.start(cmd, log_dir=tmp_path / "logs", name="bad")
            problems.append(f"{kind}: started")
        except serve.BadModelFile as exc:
            started = children_loading(path)
            if problem and needle in str(exc) and str(path) in str(exc) and not started:
                refused += 1
            else:
                problems.append(f"{kind}: {exc} (started {started})")
        # llama-server's own verdict on the same file, and whether `lab doctor` recognises it
        proc = subprocess.run([str(paths.tool("llama-server")), "-m", str(path), "--port", str(serve.free_port()),
                               "--host", "127.0.0.1"], capture_output=True, text=True, timeout=120,
                              env=engines.minimal_env())
        found = troubleshoot.match_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 and any(f.severity == "error" and f.entry_id.startswith(("gguf-", "llamacpp-"))
                                        for f in found):
            recognised += 1
        else:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            problems.append(f"{kind}: llama-server exit {proc.returncode}, doctor: {[f.entry_id for f in found]}, {tail}")
    record_figure("bad model files refused before llama.cpp loads them", len(files), refused)
    record_figure("bad model files: llama-server's own error recognised by lab doctor", len(files), recognised)
    assert refused == recognised == len(files), "\n".join(problems)
    assert not list((tmp_path / "logs").glob("*")) if (tmp_path / "logs").exists() else True


def test_a_changed_model_file_is_noticed_on_the_next_run(smol_model, tmp_path):
    model = tmp_path / "model.gguf"
    shutil.copyfile(smol_model, model)
    prof = profiles.Profile(**{**profiles.load("cpu-default").model_dump(), "model_file": str(model)})
    profile_path = profiles.resolve("cpu-default")
    runs = tmp_path / "runs"
    first = runs / "20260101T000000Z_aaaa"
    second = runs / "20260101T000100Z_aaaa"
    for run in (first, second):
        (run / "records").mkdir(parents=True)
    manifest.write(first, prof, profile_path, "2026-01-01T00:00:00Z", [])
    with open(model, "r+b") as fh:  # same size, same path, one byte different
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    manifest.write(second, prof, profile_path, "2026-01-01T00:01:00Z", [])
    one, two = (json.loads((r / "manifest.json").read_text()) for r in (first, second))
    assert len(one["model_files"][0]["sha256"]) == 64 and one["model_changed"] == []
    [change] = two["model_changed"]
    assert change["previous_run"] == first.name and change["previous_sha256"] == one["model_files"][0]["sha256"]
    assert change["sha256"] == two["model_files"][0]["sha256"] != change["previous_sha256"]
    from lab.records import report

    assert "Model file changed since run" in report.build(second).read_text()
    record_figure("changed model file noticed on the next run", 1, 1)
