"""Notebooks tier: the session's one `lab run` of every notebook on cpu-default (conftest.cpu_default_run, the
real CLI and papermill): the run folder as a whole, then the records of notebooks 01 and 02."""
import json
from pathlib import Path

import pytest
from conftest import (CPU_DEFAULT_NOTEBOOKS, CPU_DEFAULT_PLAN, ROOT, SPEED_DEPENDENT_CHECKS, failed_checks,
                      notebook_record)

from lab.core import evidence, paths

pytestmark = pytest.mark.notebooks


@pytest.fixture(scope="module")
def run_dir(cpu_default_run) -> Path:
    return cpu_default_run


def test_run_folder_has_everything(run_dir):
    assert (run_dir / "report.html").stat().st_size > 1_000_000  # plotly.js embedded
    names = sorted(p.name for p in (run_dir / "notebooks").glob("*.ipynb"))
    assert [n[:2] for n in names] == CPU_DEFAULT_NOTEBOOKS.split(",")
    assert names == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))  # every notebook, as `make run`
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {n["notebook"]: n["status"] for n in manifest["notebooks"]} == {n[:-6]: "ok" for n in names}
    # "ok", or failed checks that are all the machine's speed (conftest.SPEED_DEPENDENT_CHECKS: an overloaded box)
    failed = failed_checks(run_dir)
    print("failed checks:", failed)
    assert manifest["status"] == "ok" or (manifest["status"] == "checks failed" and failed
                                          and all(SPEED_DEPENDENT_CHECKS.match(n) for n in failed)), (manifest["status"], failed)
    assert manifest["model_files"][0]["sha256"] == evidence.sha256_file(manifest["model_files"][0]["path"])
    # the profile that ran: params/cpu-default.yaml on a free port with the tests' plan (conftest.cpu_default_profile)
    assert manifest["profile"]["sha256"] == evidence.sha256_file(manifest["profile"]["file"])
    ran, shipped = (Path(manifest["profile"]["file"]).read_text().splitlines(),
                    (ROOT / "params" / "cpu-default.yaml").read_text().splitlines())
    assert len(ran) == len(shipped)
    assert {a.split(":")[0] for a, b in zip(ran, shipped) if a != b} == {"port", *CPU_DEFAULT_PLAN}


def test_executed_notebooks_have_no_cell_timings(run_dir):
    nb = json.loads((run_dir / "notebooks" / "02_install_verification.ipynb").read_text())
    for cell in nb["cells"]:
        assert "execution" not in cell["metadata"]
        assert "duration" not in cell["metadata"].get("papermill", {})


def test_hardware_record(run_dir):
    rec = notebook_record(run_dir, "01_hardware_checks", "01_hardware")
    assert rec["schema_version"] == evidence.SCHEMA_VERSION
    gpu_checks = [c for c in rec["checks"] if c["name"].lower().startswith("gpu")]
    assert gpu_checks and all(c["status"] == "skip" for c in gpu_checks)  # no GPU on cpu-default
    assert rec["gpu_links"]["pairs"] == [] and "GPU pair link" in {c["name"] for c in gpu_checks}
    assert rec["bandwidth"]["kind"] == "host_ram" and rec["bandwidth"]["gb_s"] > 0.5
    assert len(rec["bandwidth"]["samples"]) >= 3


def test_install_record(run_dir):
    rec = notebook_record(run_dir, "02_install_verification", "02_install")
    checks = {c["name"]: c for c in rec["checks"]}
    assert checks["llama-cpp-python imports"]["status"] == "pass"
    assert checks["bindings and tools share one llama.cpp build"]["status"] == "pass"
    for tool in paths.LLAMA_TOOLS:  # the tools set-up builds
        assert checks[f"{tool} built"]["status"] == "pass"
    assert rec["summary"]["llama-cpp-python"] == "0.3.36"
    assert rec["summary"]["rules failed"] == 0
    assert all(c["source"] for c in rec["checks"])  # every verdict carries its source
