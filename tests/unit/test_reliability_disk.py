"""A full disk, without filling one: lab.core.evidence's one writer (`_write_bytes`, under `write_whole`) is made to
fail with ENOSPC for chosen files. A record's write says which folder and how many bytes; the run's manifest says
"failed" when the report could not be written (never "ok" over a missing or cut file), stderr says so when the
manifest cannot be written either; a raw server log (it may hold a key) is removed when its redacted copy cannot be
written; a notebook papermill saved cut short fails its notebook instead of the run. Figure: full-disk cases tried /
handled."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from conftest import record_figure

from lab.core import disk, evidence, profiles
from lab.core.paths import NOTEBOOKS
from lab.records import runner

KEY = "disk-test-key-Pq8Rt3Vx6Zb1Nm4K"


@pytest.fixture
def full_disk(monkeypatch):
    """full_disk(names): writes of files whose final name is in `names` (or all, with None) fail with ENOSPC."""
    real = evidence._write_bytes

    def arm(names: set[str] | None = None):
        def write(path: Path, data: bytes) -> None:
            if names is None or path.name.removesuffix(".partial") in names:
                with open(path, "wb") as fh:  # a partial write, as a full disk leaves one
                    fh.write(data[:10])
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            real(path, data)
        monkeypatch.setattr(evidence, "_write_bytes", write)
    return arm


def _run(tmp_path: Path) -> tuple[runner.SuiteResult, profiles.Profile, Path]:
    path = profiles.resolve("cpu-default").resolve()
    result = runner.SuiteResult(tmp_path / "run")
    (result.run_dir / "records").mkdir(parents=True)
    result.results.append(runner.NotebookResult("01_hardware", "ok", 1.0))
    return result, profiles.load(path), path


def _case_record(tmp_path, full_disk, capsys) -> str | None:
    run_dir = tmp_path / "rec"
    first = evidence.write_record(run_dir, "01_hardware", {"summary": {"gpus_seen": 1}})
    before = first.read_text()
    full_disk({"01_hardware.json"})
    with pytest.raises(disk.DiskSpaceError) as err:
        evidence.write_record(run_dir, "01_hardware", {"summary": {"gpus_seen": 2}, "inventory": "x" * 5000})
    msg = str(err.value)
    ok = (msg.startswith(f"{run_dir / 'records'}: no space left to write 01_hardware.json: it needs ")
          and "bytes are free" in msg and "--out" in msg and first.read_text() == before
          and not list(run_dir.rglob("*.partial")))
    return None if ok else f"record: {msg!r}; partial left: {list(run_dir.rglob('*.partial'))}"


def _case_report(tmp_path, full_disk, capsys) -> str | None:
    result, prof, path = _run(tmp_path)
    full_disk({"report.html"})
    runner.write_manifest_and_report(result, prof, path, evidence.utc_now())
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    err = capsys.readouterr().err
    ok = (manifest["status"] == "failed" and "report.html not written: DiskSpaceError" in manifest["errors"][0]
          and str(result.run_dir) in manifest["errors"][0] and not (result.run_dir / "report.html").exists()
          and not result.ok and result.exit_code == 1 and "[run] FAILED: report.html not written" in err
          and not list(result.run_dir.rglob("*.partial")))
    return None if ok else f"report: manifest {manifest.get('status')} {manifest.get('errors')}; stderr {err!r}"


def _case_everything(tmp_path, full_disk, capsys) -> str | None:
    result, prof, path = _run(tmp_path)
    full_disk(None)
    runner.write_manifest_and_report(result, prof, path, evidence.utc_now())
    err = capsys.readouterr().err
    ok = (not (result.run_dir / "manifest.json").exists() and f"[run] FAILED: {result.run_dir} has no manifest; "
          "the run failed" in err and "needs" in err and result.exit_code == 1
          and not list(result.run_dir.rglob("*.partial")))
    return None if ok else f"everything: stderr {err!r}"


def _case_raw_log(tmp_path, full_disk, capsys) -> str | None:
    run_dir = tmp_path / "logs-run"
    raw = run_dir / "logs" / ".04_serve.log.partial"
    raw.parent.mkdir(parents=True)
    raw.write_text(f"server started with --api-key {KEY}\n")
    full_disk({"04_serve.log"})
    done = runner.finish_partial_files(run_dir, "cut", (KEY,))
    left = [p for p in run_dir.rglob("*") if p.is_file()]
    ok = not left and done and "the raw log was removed" in done[0]
    return None if ok else f"raw log: left {left}, said {done}"


def _case_notebook(tmp_path, full_disk, capsys, monkeypatch) -> str | None:
    import papermill

    run_dir = tmp_path / "nb-run"
    (run_dir / "notebooks").mkdir(parents=True)
    book = sorted(NOTEBOOKS.glob("01_*.ipynb"))[0]

    def cut_short(src, out, **kw):  # papermill's own save on a full disk: a notebook cut mid-string
        Path(out).write_text('{"cells": [{"source": "unterminated')
    monkeypatch.setattr(papermill, "execute_notebook", cut_short)
    res = runner.run_notebook(book, run_dir, Path("profile.yaml"))
    ok = res.status == "failed" and "could not be saved whole" in (res.error or "")
    return None if ok else f"notebook: {res}"


def test_a_full_disk_is_said_and_never_reads_as_ok(tmp_path, full_disk, capsys, monkeypatch):
    cases = {"record": _case_record, "report": _case_report, "everything": _case_everything,
             "raw log": _case_raw_log}
    problems = [p for name, case in cases.items() if (p := case(tmp_path / name, full_disk, capsys))]
    monkeypatch.setattr(evidence, "_write_bytes", evidence._write_bytes)  # the notebook case fails by itself
    problems += [p for p in [_case_notebook(tmp_path, full_disk, capsys, monkeypatch)] if p]
    record_figure("full-disk writes (record, report, every file, raw log, cut notebook)", len(cases) + 1,
                  len(cases) + 1 - len(problems))
    assert not problems, "\n".join(problems)
