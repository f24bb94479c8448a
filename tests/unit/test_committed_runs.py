"""Every run folder committed under outputs/ (the README's evidence) re-renders with today's `lab report` code, and
its records have their GPU figures in the schema's shape: as written (schema_version 2) or read through the one
documented migration (version 1: lab.core.fields.canonical). A change to the records, the schema or the report that
would leave the published evidence unreadable fails here, on CPU."""
import html
import json
import shutil
from pathlib import Path

import pytest

from lab.core import evidence, fields, run_folder
from lab.records import report

ROOT = Path(__file__).resolve().parents[2]
RUN_FOLDERS = sorted({p.parent.parent for p in ROOT.glob("outputs/**/records/*.json")})


def test_there_are_committed_runs_to_check():
    assert len(RUN_FOLDERS) >= 8, RUN_FOLDERS  # outputs/h200-x1 (5), outputs/peer_clients-* (5)


@pytest.mark.parametrize("path", sorted(ROOT.glob("outputs/**/records/*.json")),
                         ids=lambda p: str(p.relative_to(ROOT / "outputs")))
def test_every_committed_record_validates(path):
    record = json.loads(path.read_text())
    version = record.get("schema_version") if isinstance(record, dict) else None
    assert version in (None, 1, evidence.SCHEMA_VERSION), version
    assert fields.gpu_shape_problems(record if version == evidence.SCHEMA_VERSION else fields.canonical(record)) == []


@pytest.mark.parametrize("run", RUN_FOLDERS, ids=lambda p: str(p.relative_to(ROOT / "outputs")))
def test_every_committed_run_folder_re_renders(run, tmp_path):
    copy = shutil.copytree(run, tmp_path / run.name, ignore=shutil.ignore_patterns("report.html"))
    page = report.build(copy, require_run=True).read_text()
    records = run_folder.read_records(copy)
    assert records
    for record in records.values():  # a section for each, under its title (report._title drops the "NN · ")
        assert html.escape(report._title(record)) in page, record.get("record")
    assert "Traceback" not in page
