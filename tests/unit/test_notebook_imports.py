"""Each notebook's one lab import is its page (`from lab.pages import <page> as page`): what it calls is named there,
in the user's words, and a contributor finds a notebook's code in one module (lab/pages/__init__.py lists them)."""
import ast
import json

import pytest

from lab.core.paths import NOTEBOOKS

PAGES = {"01_hardware_checks": "hardware", "02_install_verification": "install", "03_quantize": "quantize",
         "04_serve": "serve", "05_kv_cache_math": "kv_cache", "06_benchmarking": "benchmark",
         "07_troubleshooting": "troubleshoot"}


def lab_imports(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lab":
                found += [f"from {node.module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
                          for a in node.names]
            elif isinstance(node, ast.Import):
                found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "lab"]
    return found


def test_every_notebook_has_a_page():
    assert sorted(PAGES) == sorted(p.stem for p in NOTEBOOKS.glob("0*.ipynb"))


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_notebook_imports_its_page_and_nothing_else_from_lab(name):
    assert lab_imports(name) == [f"from lab.pages import {PAGES[name]} as page"]


def code_cells(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_profile_arrives_once_as_the_notebooks_parameters(name):
    # the parameters cell's three names go to page.start as arguments: nothing is read back from the kernel's history
    params, session_cell = code_cells(name)[:2]
    assigned = [n.target.id for n in ast.parse(params).body if isinstance(n, ast.AnnAssign)]
    assert assigned == ["profile", "run_dir", "settings"]
    assert "s = page.start(profile, run_dir, settings)" in session_cell


@pytest.mark.parametrize("name", sorted(PAGES))
def test_no_cell_assigns_name_or_description(name):
    # what lab.core.session.injected_profile tells a profile papermill injected as variables (-f X.yaml) by
    stored = {n.id for cell in code_cells(name) for n in ast.walk(ast.parse(cell))
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assert not stored & {"name", "description"}
