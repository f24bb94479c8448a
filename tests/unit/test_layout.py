"""The package layout of lab/ (README, "Code layout"): every module imports, no import cycles, each layer
imports only its own package and lower layers (no exceptions), no module grows past 500 lines, and the set-up
package needs nothing but the standard library (it runs with the system python3 before any venv exists; of core it
imports lab.core.paths alone, which is standard library only too)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from conftest import ROOT


LAB = ROOT / "lab"

# Layer of each package: a module may import its own package and packages with a smaller number.
# lab.core at the bottom (lab.core.paths: where everything lives, standard library only); lab.setup above it
# (it reads those locations, builds what model-layer modules use: lab.model.synth_metadata copies the tokenizer
# GGUFs with lab.setup.llama_source) and under everything else. lab.pages (one module per notebook: its tables,
# charts, record and closing text) sits on top of everything.
LAYERS = {"core": 0, "setup": 1, "model": 2, "predict": 3, "serving": 4, "measure": 5, "diagnose": 6, "records": 7,
          "pages": 8}
MAX_LINES = 500
# Over MAX_LINES today and being split: this list only shrinks (a module not named here must stay under).
OVERSIZED: set[str] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(LAB.rglob("*.py"))}


def lab_imports(path: Path) -> set[str]:
    """The lab modules `path` imports, at any depth of the file (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name == "lab" or a.name.startswith("lab."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "lab":
            for a in node.names:  # `from lab.core import paths` imports the module lab.core.paths
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


GRAPH = {name: lab_imports(path) - {name} for name, path in MODULES.items()}


def package(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_lab_module_is_in_a_layer_package():
    top = {"lab", "lab.__main__"}
    stray = [n for n in MODULES if n not in top and package(n) is None]
    assert not stray, f"modules outside the layer packages of README's code layout: {stray}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_imports(name):
    importlib.import_module(name)


def test_no_import_cycles():
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(GRAPH.get(node, ())):
            if dep not in GRAPH:
                continue
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_layers_import_only_downwards():
    wrong = []
    for name, deps in GRAPH.items():
        own = package(name)
        if own is None:  # lab, lab.__main__ (the CLI) sit on top
            continue
        for dep in deps:
            theirs = package(dep)
            if dep == "lab":
                continue
            if theirs is None or (theirs != own and LAYERS[theirs] > LAYERS[own]):
                wrong.append(f"{name} ({own}, layer {LAYERS[own]}) imports {dep}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


def test_no_new_module_over_the_line_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES.values()}
    new = {f: n for f, n in sizes.items() if n > MAX_LINES and f not in OVERSIZED}
    assert not new, f"modules over {MAX_LINES} lines (split them): {new}"
    missing = sorted(f for f in OVERSIZED if f not in sizes)
    assert not missing, f"OVERSIZED names files that no longer exist (remove them from the list): {missing}"


def test_setup_reads_only_paths_from_core():
    """Set-up runs with the system python before any venv exists: of the layers below it, it may import only
    lab.core.paths (standard library only at import), never a core module that needs pydantic or yaml."""
    wrong = sorted(f"{name} imports {dep}" for name, deps in GRAPH.items() if package(name) == "setup"
                   for dep in deps if package(dep) != "setup" and dep != "lab.core.paths")
    assert not wrong, "set-up imports more than lab.core.paths from below: " + "; ".join(wrong)
