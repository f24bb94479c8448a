"""Untrusted text: `lab doctor` on odd inputs (empty, 50 MB, binary, a folder, a device, a missing file) gives
a clear answer in bounded time and reads a long log whole; `lab report` / `lab compare` on run folders with
corrupt, truncated or list records flag those records and render the rest, and refuse a missing, empty or
non-folder path with exit 1; the knowledge base covers every tool the lab runs.
Figures: inputs tried / handled; seconds for 50 MB."""
import json
import time
from pathlib import Path

import pytest

from conftest import ROOT, record_figure

from lab.core import evidence, run_folder
from lab.diagnose import knowledge_base
from shared_reliability_untrusted import LOGS, _cli


def test_run_out_pointing_at_a_file_is_a_clear_error(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("x")
    rc, text = _cli(["run", "--profile", "cpu-default", "--only", "05", "--out", str(target)])
    assert rc == 2 and "not a folder" in text and "Traceback" not in text, text


TOOLS = {  # a tool the lab runs (or tells the user to run) -> how the knowledge base names it
    "llama-server": ("llama.cpp", "llama-server"), "llama-quantize": ("llama-quantize",),
    "llama-perplexity": ("llama-perplexity",), "llama-bench": ("llama-bench",), "vLLM": ("vllm",),
    "NCCL": ("nccl",), "the CUDA build (cmake/nvcc)": ("cmake", "nvcc", "llama.cpp build")}


def test_the_knowledge_base_covers_every_tool_the_lab_runs():
    import yaml

    raw = yaml.safe_load((ROOT / "lab" / "data" / "troubleshooting.yaml").read_text())["entries"]
    index = yaml.safe_load((LOGS / "INDEX.yaml").read_text())["samples"]
    sampled = {s["entry"] for s in index if s["kind"] in ("captured", "quoted")}
    covered = {tool: [e["id"] for e in raw if set(e.get("tools", [])) & set(names) and e["id"] in sampled]
               for tool, names in TOOLS.items()}
    record_figure("knowledge base: tools with entries backed by real error text", len(TOOLS),
                  sum(bool(v) for v in covered.values()), ", ".join(f"{k} {len(v)}" for k, v in covered.items()))
    assert all(covered.values()), covered
    assert len(knowledge_base.load_kb()) == len(raw)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_report_and_compare_refuse_hostile_files_in_one_line_and_flag_edited_records(tmp_path):
    """Run folders handed over: a manifest that is a symlink to /dev/zero (read until MemoryError before), JSON
    nested deeper than 200 (RecursionError tracebacks before), a record over the 64 MiB cap (a sparse file), a
    record edited or added after the run (its sha256 is not the manifest's)."""
    cases = {  # name: (manifest bytes or a symlink target, {record: bytes or symlink target}, what report.html says)
        "manifest is a symlink to /dev/zero": (Path("/dev/zero"), {}, "manifest.json: not a regular file"),
        "manifest nested 100,000 deep": (_nested(100_000), {}, "manifest.json: JSON nested deeper than 200"),
        "manifest nested 300 deep": (_nested(300), {}, "manifest.json: JSON nested deeper than 200"),
        "record is a symlink to /dev/zero": (None, {"02_zero": Path("/dev/zero")}, "02_zero: record not readable"),
        "record nested 100,000 deep": (None, {"02_deep": b'{"a": ' + _nested(100_000) + b"}"}, "nested deeper than 200"),
        "record over 64 MiB": (None, {"02_huge": 65 << 20}, "more than the 67,108,864 the lab reads"),
        "record edited after the run": (None, {"06_tune": b'{"summary": {"points_ok": 41}}'}, "edited after the run"),
        "record added after the run": (None, {"03_new": b'{"summary": {"answer": 7}}'}, "added after the run"),
    }
    handled, problems = 0, []
    for i, (name, (manifest_content, records, says)) in enumerate(cases.items()):
        run = tmp_path / f"run{i}"
        (run / "records").mkdir(parents=True)
        evidence.write_record(run, "06_tune", {"title": "Good", "summary": {"points_ok": 42}})
        body = {"run_id": run.name, "profile": {"name": "t"}, "notebooks": [], "status": "ok",
                "records": evidence.record_hashes(run)}  # as manifest.write keeps them
        (run / "manifest.json").write_text(json.dumps(body))
        if isinstance(manifest_content, Path):
            (run / "manifest.json").unlink()
            (run / "manifest.json").symlink_to(manifest_content)
        elif manifest_content is not None:
            (run / "manifest.json").write_bytes(manifest_content)
        for rec, content in records.items():
            path = run / "records" / f"{rec}.json"
            if isinstance(content, Path):
                path.symlink_to(content)
            elif isinstance(content, int):
                with open(path, "wb") as fh:
                    fh.truncate(content)  # sparse: costs no disk
            else:
                path.write_bytes(content)
        t0 = time.monotonic()
        rc, text = _cli(["report", str(run)])
        page = (run / "report.html").read_text() if (run / "report.html").exists() else ""
        rc2, compared = _cli(["compare", str(run), str(run)])
        took = time.monotonic() - t0
        in_compare = "edited after the run" in compared if "after the run" in says else rc2 == 0
        ok = rc == rc2 == 0 and says in page and in_compare and "Traceback" not in text + compared and took < 60
        handled += ok
        if not ok:
            problems.append(f"{name}: rc {rc}/{rc2} in {took:.1f} s: {text[-300:]} {compared[-300:]} "
                            f"{'(said)' if says in page else '(not said)'}")
    record_figure("report / compare on hostile run folders (devices, huge, deep, edited)", len(cases), handled)
    assert handled == len(cases), "\n".join(problems)


def test_manifest_read_is_one_line_for_a_device(tmp_path):
    from lab.records import manifest

    (tmp_path / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(run_folder.UnreadableJson, match=r"manifest.json: not a regular file \(a device, pipe or socket\)"):
        manifest.read(tmp_path)
