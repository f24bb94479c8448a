"""Source notebooks are code: parameters cell first-class, no outputs, and cells that call the lab and show.

A cell may import, assign the result of a lab call, call, index and format (f-strings, literal lists of values to
show); it may not decide, loop, compute or build evidence. Each of those belongs in the lab, where it is a named,
tested function (a notebook's record: its module's `build_record`; its closing text: `what_this_means`).
Every failure names the notebook, the cell index and the construct. There are no exceptions.
"""
import ast
import json
from pathlib import Path

import pytest

from lab.records import runner

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_all_seven_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("book", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_parse(book):
    assert runner.parameter_problem(book) is None


# Construct → why it does not belong in a cell (what to do instead).
BANNED = {
    ast.FunctionDef: "a function definition (put it in the lab)", ast.AsyncFunctionDef: "a function definition",
    ast.ClassDef: "a class definition (put it in the lab)", ast.Lambda: "a lambda (a named lab function instead)",
    ast.If: "an if statement (the lab decides; the cell shows)", ast.IfExp: "a conditional expression (the lab decides)",
    ast.For: "a for loop", ast.AsyncFor: "an async for loop", ast.While: "a while loop",
    ast.Try: "a try statement (a lab function that cleans up after itself)",
    ast.With: "a with block (a lab function that starts, works and stops)", ast.AsyncWith: "an async with block",
    ast.ListComp: "a list comprehension (it computes: a lab function)", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
    ast.BoolOp: "and/or deciding between values (the lab decides)", ast.Compare: "a comparison (the lab judges)",
    ast.Dict: "a dict literal (records and rows are built by the lab)",
}
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitOr, ast.BitAnd)
if hasattr(ast, "TryStar"):
    BANNED[ast.TryStar] = "a try statement"


def cell_problems(source: str) -> list[str]:
    """What in one code cell's source is not 'call the lab and show' (empty when the cell is clean)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]  # IPython magics
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if type(node) in BANNED:
            found.append((node.lineno, BANNED[type(node)]))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ARITHMETIC):
            found.append((node.lineno, f"arithmetic ({type(node.op).__name__}) on values (a lab function computes)"))
        elif isinstance(node, ast.Call) and "Check" in (getattr(node.func, "id", None), getattr(node.func, "attr", None)):
            found.append((node.lineno, "a Check built in the cell (the lab builds checks)"))
    return [f"{what}, line {line}" for line, what in sorted(found)]


def notebook_problems(book: Path) -> list[str]:
    """Every problem of every code cell, as 'NOTEBOOK cell INDEX: CONSTRUCT, line N' (cell index as Jupyter counts)."""
    cells = json.loads(book.read_text())["cells"]
    # the parameters cell holds papermill's typed defaults, `settings: dict = {}` among them: a literal, not a record
    return [f"{book.name} cell {i}: {problem}" for i, c in enumerate(cells) if c["cell_type"] == "code"
            for problem in cell_problems("".join(c["source"]))
            if not ("parameters" in c.get("metadata", {}).get("tags", []) and problem.startswith("a dict literal"))]


@pytest.mark.parametrize("book", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_call_the_lab_and_show(book):
    bad = notebook_problems(book)
    assert not bad, "notebook cells that do more than call the lab and show:\n" + "\n".join(bad)


def test_the_rule_catches_what_it_names():
    assert cell_problems("x = lab.f(a)\nlab.table(x)[['id', 'why']]\nprint(f'{x:.1f} s')") == []
    caught = {
        "if x:\n    y()": "an if statement", "for a in b:\n    f(a)": "a for loop", "while x:\n    f()": "a while loop",
        "try:\n    f()\nfinally:\n    g()": "a try statement", "with f() as g:\n    h(g)": "a with block",
        "y = f() if x else None": "a conditional expression", "[f(a) for a in b]": "a list comprehension",
        "sum(c.status == 'pass' for c in x)": "a generator expression", "y = x or {}": "and/or",
        "f = lambda: 1": "a lambda", "checks.Check('n', 'pass')": "a Check built", "Check(**c)": "a Check built",
        "x['a'] * 2**20": "arithmetic", "r = {'title': t}": "a dict literal", "def f():\n    pass": "a function",
        "class A:\n    pass": "a class", "a == b": "a comparison",
    }
    for src, construct in caught.items():
        problems = cell_problems(src)
        assert any(p.startswith(construct) for p in problems), (src, problems)



def test_a_failure_names_the_notebook_the_cell_and_the_construct(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# x"]}, {"cell_type": "code", "source": ["s = lab.start()"]},
             {"cell_type": "code", "source": ["x = lab.f()\n", "for a in x:\n", "    print(a)"]}]
    book = tmp_path / "09_demo.ipynb"
    book.write_text(json.dumps({"cells": cells}))
    assert notebook_problems(book) == ["09_demo.ipynb cell 2: a for loop, line 2"]


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
    from lab.setup import jupyter

    spec = json.loads(book.read_text())["metadata"]["kernelspec"]
    assert (spec["name"], spec["display_name"]) == (jupyter.KERNEL_NAME, jupyter.KERNEL_DISPLAY_NAME)
