"""The tools tier of tests/unit/test_layout.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.tools
def test_setup_imports_with_the_standard_library_only():
    """`python3 -m lab.setup` runs before the venv exists: an isolated interpreter (-I: no user site,
    no PYTHONPATH) must import the set-up package and its modules with nothing but the stdlib."""
    code = (f"import sys\nbefore = set(sys.modules)\nsys.path.insert(0, {str(ROOT)!r})\n"
            "import importlib, pkgutil, lab.setup\n"
            "for m in pkgutil.iter_modules(lab.setup.__path__):\n"
            "    importlib.import_module(f'lab.setup.{m.name}')\n"
            "bad = sorted(m for m in set(sys.modules) - before\n"
            "             if m.split('.')[0] not in sys.stdlib_module_names and m.split('.')[0] != 'lab')\n"
            "print(bad)\nsys.exit(1 if bad else 0)")
    python = shutil.which("python3") or sys.executable  # the system python the Makefile runs set-up with
    out = subprocess.run([python, "-I", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"lab.setup needs more than the stdlib: {out.stdout}{out.stderr}"


@pytest.mark.tools
def test_hfmodel_runs_as_a_script_without_the_lab_package(tmp_path):
    """lab.setup.vllm runs lab/setup/hfmodel.py as a file under the vLLM venv's python, where `lab` does not
    import: the script must need the standard library alone (a lab import there once broke `make test`'s set-up)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "lab" / "setup" / "hfmodel.py"
    proc = subprocess.run([sys.executable, "-I", str(script), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-1000:]
