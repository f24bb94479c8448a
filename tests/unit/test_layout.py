"""The package layout of lab/ (README, "Code layout"): every module imports, no import cycles, each layer
imports only its own package and lower layers (no exceptions), no module grows past 500 lines, and the set-up
package needs nothing but the standard library (it runs with the system python3 before any venv exists; of core it
imports lab.core.paths alone, which is standard library only too)."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from conftest import ROOT


LAB = ROOT / "lab"

# Layer of each package: a module may import its own package and packages with a smaller number.
# lab.core at the bottom (lab.core.paths: where everything lives, standard library only); lab.setup above it
# (it reads those locations, builds what model-layer modules use: lab.model.synth_metadata copies the tokenizer
# GGUFs with lab.setup.llama_source) and under everything else. Modules sit by what they are: lab.measure holds
# instruments (measure one thing, return numbers; no `main`), lab.experiments what runs instruments against servers
# in a planned order (each has a `main`), above diagnose (which reads instruments alone) and under records and pages
# (notebook 06's page runs tune and speculative as steps). lab.pages (one module per notebook: its tables, charts,
# steps, record and closing text) sits on top of everything.
LAYERS = {"core": 0, "setup": 1, "model": 2, "predict": 3, "serving": 4, "measure": 5, "diagnose": 6,
          "experiments": 7, "records": 8, "pages": 9}
# Instruments that keep a `__main__` block, and why: not an experiment, the process the instrument itself starts.
PROCESS_ENTRIES = {"lab.measure.bench_source": "running() starts it with -m in its own process, off the client's core"}
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
    lab.core.paths and lab.core.text (standard library only at import), never a core module that needs pydantic or
    yaml."""
    wrong = sorted(f"{name} imports {dep}" for name, deps in GRAPH.items() if package(name) == "setup"
                   for dep in deps if package(dep) != "setup" and dep not in ("lab.core.paths", "lab.core.text"))
    assert not wrong, "set-up imports more than lab.core.paths from below: " + "; ".join(wrong)


def top_level_main(path: Path) -> tuple[bool, bool]:
    """(defines a top-level `main`, has an `if __name__ == "__main__":` block)."""
    tree = ast.parse(path.read_text(), str(path))
    has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    has_block = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    return has_main, has_block


def modules_of(pkg: str) -> list[str]:
    return sorted(n for n in MODULES if n.startswith(f"lab.{pkg}."))


def test_instruments_have_no_main():
    """An instrument measures one thing and returns numbers; what runs instruments in a planned order with a command
    line of its own is an experiment (lab/experiments), or a notebook's step (its page)."""
    wrong = [f"{n} ({'main()' if m else ''}{' and ' if m and b else ''}{'a __main__ block' if b else ''})"
             for n in modules_of("measure") if n not in PROCESS_ENTRIES for m, b in [top_level_main(MODULES[n])] if m or b]
    assert not wrong, "instruments with a command line (move them to lab/experiments): " + "; ".join(wrong)
    stale = [n for n in PROCESS_ENTRIES if n not in MODULES]
    assert not stale, f"PROCESS_ENTRIES names modules that no longer exist: {stale}"


def test_each_experiment_has_a_main():
    """Each experiment module exposes `main`; a module without one is a part of an experiment and is imported by a
    sibling that has one (tune_settings by tune, peer_verdicts by peer_clients)."""
    runnable = {n for n in modules_of("experiments") if top_level_main(MODULES[n])[0]}
    assert runnable, "lab/experiments has no module with a main"
    orphans = [n for n in modules_of("experiments") if n not in runnable and not any(n in GRAPH[r] for r in runnable)]
    assert not orphans, f"experiment modules with no main that no experiment imports (an instrument? lab/measure): {orphans}"


@pytest.mark.parametrize("pkg", ["measure", "experiments"])
def test_package_docstring_lists_its_modules(pkg):
    doc = ast.get_docstring(ast.parse((LAB / pkg / "__init__.py").read_text())) or ""
    missing = [n.rsplit(".", 1)[1] for n in modules_of(pkg) if not re.search(rf"\b{n.rsplit('.', 1)[1]}\b", doc)]
    assert not missing, f"lab/{pkg}/__init__.py's docstring does not name: {missing}"


def test_no_private_name_is_imported_from_another_module():
    # a name used by another module is public: a `_name` import across modules hid a module boundary drawn by size
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("lab"):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found
