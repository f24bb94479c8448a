"""Tier 3: papermill runs notebooks 01 and 02 on cpu-default through the real CLI; assert on records."""
import json
from pathlib import Path

import pytest
from conftest import lab_run

from lab.core import evidence

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return lab_run(tmp_path_factory.mktemp("runs"), "cpu-default", "01,02")


def test_run_folder_has_everything(run_dir):
    assert (run_dir / "report.html").stat().st_size > 1_000_000  # plotly.js embedded
    names = sorted(p.name for p in (run_dir / "notebooks").glob("*.ipynb"))
    assert names == ["01_hardware_checks.ipynb", "02_install_verification.ipynb"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert [n["status"] for n in manifest["notebooks"]] == ["ok", "ok"]
    assert manifest["model_files"][0]["sha256"] == evidence.sha256_file(manifest["model_files"][0]["path"])
    assert manifest["profile"]["sha256"] == evidence.sha256_file(ROOT / "params" / "cpu-default.yaml")


def test_executed_notebooks_have_no_cell_timings(run_dir):
    nb = json.loads((run_dir / "notebooks" / "02_install_verification.ipynb").read_text())
    for cell in nb["cells"]:
        assert "execution" not in cell["metadata"]
        assert "duration" not in cell["metadata"].get("papermill", {})


def test_hardware_record(run_dir):
    rec = json.loads((run_dir / "records" / "01_hardware.json").read_text())
    assert rec["schema_version"] == 1
    gpu_checks = [c for c in rec["checks"] if c["name"].lower().startswith("gpu")]
    assert gpu_checks and all(c["status"] == "skip" for c in gpu_checks)  # no GPU on cpu-default
    assert rec["gpu_links"]["pairs"] == [] and "GPU pair link" in {c["name"] for c in gpu_checks}
    assert rec["bandwidth"]["kind"] == "host_ram" and rec["bandwidth"]["gb_s"] > 0.5
    assert len(rec["bandwidth"]["samples"]) >= 3


def test_install_record(run_dir):
    rec = json.loads((run_dir / "records" / "02_install.json").read_text())
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["llama-cpp-python imports"]["status"] == "pass"
    assert checks["bindings and tools share one llama.cpp build"]["status"] == "pass"
    for tool in ("llama-server", "llama-bench", "llama-quantize", "llama-perplexity"):
        assert checks[f"{tool} built"]["status"] == "pass"
    assert rec["summary"]["llama-cpp-python"] == "0.3.36"
    assert rec["summary"]["rules failed"] == 0
    assert all(c["source"] for c in rec["checks"])  # every verdict carries its source
