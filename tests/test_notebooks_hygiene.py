"""Source notebooks are code: parameters cell first-class, no outputs, no function definitions."""
import json
from pathlib import Path

import pytest

from lab.records import runner

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_all_seven_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("book", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_parse(book):
    assert runner.parameter_problem(book) is None


@pytest.mark.parametrize("book", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs_or_functions(book):
    nb = json.loads(book.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert sum("parameters" in c["metadata"].get("tags", []) for c in code) == 1
    for c in code:
        src = "".join(c["source"])
        assert not c.get("outputs") and not c.get("execution_count"), f"{book.name} has outputs"
        assert "\ndef " not in "\n" + src and "\nclass " not in "\n" + src, f"{book.name} defines a function"
    assert nb["metadata"]["kernelspec"]["name"] == "llm-lab"


@pytest.mark.parametrize("book", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_kernel_name_everywhere(book):
    from lab import setup

    spec = json.loads(book.read_text())["metadata"]["kernelspec"]
    assert (spec["name"], spec["display_name"]) == (setup.KERNEL_NAME, setup.KERNEL_DISPLAY_NAME) == (runner.KERNEL_NAME, spec["display_name"])
