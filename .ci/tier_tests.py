#!/usr/bin/env python3
"""Puts every test file in its tier's folder (tests/unit, tests/tools, tests/notebooks: TIERS in tests/conftest.py),
splitting a file whose tests are in more than one tier. Re-runnable: it looks at the tests as pytest collects them,
so after a merge that edited or added test files (in tests/ or in a tier folder) it moves and splits what is not
in place yet, and does nothing to what is.

    .venv/bin/python .ci/tier_tests.py check   # what `move` and `split` would do; exit 1 when anything
    .venv/bin/python .ci/tier_tests.py move    # `git mv` only: commit it alone ("move tests ... (no change)")
    .venv/bin/python .ci/tier_tests.py split   # the edits: commit them after the move

A test's tier is its marker (`notebooks`; `tools`, `integration` or `vllm`; `unit`), else its folder's tier, else
unit. `move`: a file whose tests are all in one tier goes to that tier's folder; a mixed file goes to tests/unit
when it holds unit tests (they carry no marker, so they must stay where the folder says unit), else to the tier
with the most tests. `split` (edits, in this order):
  1. paths written for a file directly in tests/ get one level deeper (`Path(__file__).parent` and
     `.parent.parent` become `.resolve().parents[1]` and `.resolve().parents[2]`), and a file's own
     `ROOT = Path(__file__)...` becomes `from conftest import ROOT`;
  2. the tests of another tier leave their file for tests/<tier>/<stem>_<tier>.py, with the imports and the
     module-level helpers only they use; helpers both halves use go to tests/shared_<stem>.py, imported by both
     (one definition: a fixture or constant is never copied);
  3. `tests/<file>` in the repo's text files (docs, comments; outputs/ holds past records and is left as it is)
     names the file's new place.
A half that exists already is not overwritten: the command stops and names it (after a merge that conflicts in a
split file: put the merged flat file back in tests/, delete its halves, run move and split again).
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
TIERS = ("unit", "tools", "notebooks")  # the order of tests/conftest.py TIERS; a tie in `move` goes to the later


def collect() -> dict[Path, dict[str, set[str]]]:
    """{test file: {tier: names of its top-level tests (function or class)}} as pytest collects them now."""
    import pytest

    found: dict[Path, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))

    class Plugin:
        @pytest.hookimpl(tryfirst=True)  # before tests/conftest.py adds the tier markers: the marked tier only
        def pytest_collection_modifyitems(self, items):
            conftest = sys.modules["conftest"]
            for item in items:
                tier = conftest.marked_tier(item) or conftest.folder_tier(item) or "unit"
                name = item.nodeid.split("::")[1].split("[")[0]
                found[Path(item.path)][tier].add(name)

    os.environ["LAB_TIER_TESTS"] = "1"  # tests/conftest.py: report a test outside its tier's folder, don't refuse
    rc = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", str(TESTS)], plugins=[Plugin()])
    if rc not in (0, 5):
        sys.exit(f"pytest could not collect the tests (exit {rc}): fix that first")
    return found


def home(tiers: dict[str, set[str]]) -> str:
    if "unit" in tiers:
        return "unit"
    return max(tiers, key=lambda t: (len(tiers[t]), TIERS.index(t)))


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def plan_moves(found) -> list[tuple[Path, Path]]:
    return [(path, TESTS / home(tiers) / path.name) for path, tiers in sorted(found.items())
            if path.parent != TESTS / home(tiers)]


# ---------------------------------------------------------------- split
def used_names(node: ast.AST) -> set[str]:
    """Names a statement refers to: variables, a test's or fixture's arguments (fixtures by name), identifier-like
    strings (usefixtures, getfixturevalue, indirect parametrize)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            names.add(n.value)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.update(a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs)
    return names


def defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def is_test(node: ast.stmt) -> bool:
    return (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")) or \
        (isinstance(node, ast.ClassDef) and node.name.startswith("Test"))


def is_autouse(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
        any("autouse" in ast.unparse(d) for d in node.decorator_list)


def segments(source: str, tree: ast.Module) -> list[tuple[ast.stmt, str]]:
    """Each top-level statement with its text, the comments and blank lines above it included (they go with it)."""
    lines = source.splitlines(keepends=True)
    out, start = [], 0
    for i, node in enumerate(tree.body):
        end = node.end_lineno if i < len(tree.body) - 1 else len(lines)
        out.append((node, "".join(lines[start:end])))
        start = end
    return out


def import_text(node: ast.stmt, text: str, wanted: set[str]) -> str:
    """An import statement keeping only the names in `wanted` ('' when none); `from __future__` always stays."""
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return text
    keep = [a for a in node.names if (a.asname or a.name).split(".")[0] in wanted]
    if len(keep) == len(node.names):
        return text
    if not keep:
        return ""
    lead = text[:len(text) - len(text.lstrip())]
    return lead + ast.unparse(type(node)(**{**node.__dict__, "names": keep})) + "\n"


def body_text(parts: list[tuple[ast.stmt, str]], names: set[str]) -> tuple[str, str]:
    """(imports, everything else) of a half: the imports cut to the names its other statements use."""
    rest = [(n, t) for n, t in parts if not isinstance(n, (ast.Import, ast.ImportFrom))]
    uses = set().union(*(used_names(n) for n, _ in rest)) | names
    imports, gap = "", ""
    for n, t in parts:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            text = import_text(n, t, uses)
            lead = t[:len(t) - len(t.lstrip("\n"))]
            if not text:
                gap = gap or lead
                continue
            imports += (gap + text.lstrip("\n") if gap and not text.startswith("\n") else text)
            gap = ""
    return imports, "".join(t for _, t in rest)


def module(imports: str, rest: str) -> str:
    """Imports, then the statements two blank lines below them (the blank lines they had may have gone with a
    statement left in the other half)."""
    return imports.strip("\n") + "\n\n\n" + rest.lstrip("\n") if imports.strip() else rest.lstrip("\n")


def from_import(module: str, names: set[str]) -> str:
    return f"from {module} import {', '.join(sorted(names))}\n" if names else ""


def split(path: Path, tiers: dict[str, set[str]]) -> list[Path]:
    """Split one file in a tier folder: the tests of other tiers go to their folders (see the module docstring)."""
    folder = path.parent.name
    source = path.read_text()
    tree = ast.parse(source)
    segs = segments(source, tree)
    doc = segs[0] if isinstance(tree.body[0], ast.Expr) and isinstance(getattr(tree.body[0], "value", None),
                                                                         ast.Constant) else None
    tier_of = {name: tier for tier, names in tiers.items() for name in names}
    defs = {name: node for node, _ in segs for name in defined_names(node) if not is_test(node)}
    autouse = {node.name for node, _ in segs if is_autouse(node)}

    def closure(start: set[str]) -> set[str]:
        need, todo = set(), list(start)
        while todo:
            name = todo.pop()
            if name in defs and name not in need and name != "pytestmark":
                need.add(name)
                todo.extend(used_names(defs[name]))
        return need

    need = {t: closure(set().union(*(used_names(n) for n, _ in segs if is_test(n) and tier_of.get(n.name, folder) == t))
                       | autouse) for t in set(tier_of.values()) | {folder}}
    shared = {name for name in defs if sum(name in need[t] for t in need) > 1}
    stem = path.stem.removeprefix("test_")
    shared_mod = f"shared_{stem}"
    made = []
    halves = {t: [] for t in need}
    shared_parts = []
    for node, text in segs:
        if doc and node is doc[0]:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for parts in [shared_parts, *halves.values()]:
                parts.append((node, text))
        elif is_test(node):
            halves[tier_of.get(node.name, folder)].append((node, text))
        elif defined_names(node) == {"pytestmark"}:
            for parts in halves.values():
                parts.append((node, text))
        elif defined_names(node) & shared:
            shared_parts.append((node, text))
        else:
            owners = [t for t in need if defined_names(node) & need[t]]
            halves[owners[0] if owners else folder].append((node, text))
    targets = {t: TESTS / t / f"{path.stem}_{t}.py" for t in halves if t != folder}
    for t, target in targets.items():
        if target.exists():
            sys.exit(f"{target.relative_to(ROOT)} exists: merge {path.relative_to(ROOT)}'s {t} tests into it by hand,"
                     " or delete it and run split again")
    if shared and (TESTS / f"{shared_mod}.py").exists():
        sys.exit(f"tests/{shared_mod}.py exists: delete it (and {path.name}'s halves) and run split again")
    doc_text = doc[1] if doc else ""
    if shared:
        imports, rest = body_text(shared_parts, set())
        for pattern, repl in SHALLOW:  # it sits in tests/, one folder up from the file it came from
            rest = pattern.sub(repl, rest)
        (TESTS / f"{shared_mod}.py").write_text(
            f'"""What the tiers of tests/{folder}/{path.name} share (split by .ci/tier_tests.py): fixtures and '
            f'helpers\nused by tests in more than one tier, defined once."""\n' + module(imports, rest))
        made.append(TESTS / f"{shared_mod}.py")
    for t, parts in halves.items():
        wanted = (set().union(*(used_names(n) for n, _ in parts)) | autouse) & shared  # autouse: imported to apply
        imports, rest = body_text(parts, wanted)
        imports += from_import(shared_mod, wanted)
        if t == folder:
            path.write_text(doc_text + module(imports, rest))
            continue
        quote = doc_text.lstrip()[:3] if doc_text else '"""'
        # the docstring stays in the source file only: a copy in each tier's file would be two texts to keep true
        head = (f'{quote}The {t} tier of tests/{folder}/{path.name} (split from it by .ci/tier_tests.py): what these '
                f'tests check, and\nwhy, is that file\'s docstring.{quote}\n') if doc_text else \
            f'"""The {t} tier of tests/{folder}/{path.name}."""\n'
        targets[t].write_text(head + module(imports, rest))
        made.append(targets[t])
    return made


DEPTH = [(re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parent\.parent(?![.\w])"), "Path(__file__).resolve().parents[2]"),
         (re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parent(?![.\w])"), "Path(__file__).resolve().parents[1]")]
# The repository root computed from a file's place: conftest's ROOT instead (one answer, right from any folder).
OWN_ROOT = re.compile(r"^(ROOT = Path\(__file__\)(?:\.resolve\(\))?\.parent\.parent|from conftest import ROOT)\n", re.M)


def root_from_conftest(text: str) -> str:
    """A file's own `ROOT = Path(__file__)...parent.parent` (or a lone `from conftest import ROOT` below its code)
    becomes ROOT imported from conftest among its imports (nothing when the file does not use ROOT)."""
    tree = ast.parse(text)
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    block_end = next((n.lineno - 1 for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
                      and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))), len(text))
    lines = text.splitlines(keepends=True)
    stray = [i for i, line in enumerate(lines) if OWN_ROOT.fullmatch(line) and
             not (line.startswith("from conftest") and i < block_end)]
    if not stray:
        return text
    for i in reversed(stray):
        del lines[i]
    text = "".join(lines)
    if not re.search(r"\bROOT\b", text):
        return text
    conf = re.search(r"^from conftest import (.+)$", text, re.M)
    if conf:
        names = sorted({*conf.group(1).split(", "), "ROOT"})
        return text[:conf.start()] + "from conftest import " + ", ".join(names) + text[conf.end():]
    last = max((n for n in top if n.lineno - 1 < stray[0]), key=lambda n: n.end_lineno, default=None)
    at = sum(len(line) for line in text.splitlines(keepends=True)[:last.end_lineno]) if last else 0
    return text[:at] + "from conftest import ROOT\n" + text[at:]


SHALLOW = [(re.compile(r"\.resolve\(\)\.parents\[1\](?![.\w])"), ".resolve().parent"),
           (re.compile(r"\.resolve\(\)\.parents\[2\](?![.\w])"), ".resolve().parents[1]")]


def deepen(path: Path) -> bool:
    text = path.read_text()
    new = root_from_conftest(text)
    for pattern, repl in DEPTH:
        new = pattern.sub(repl, new)
    if new != text:
        path.write_text(new)
    return new != text


def rename_references(moves: dict[str, str]) -> list[str]:
    """`tests/<old>` -> `tests/<new>` in the repo's tracked text files (outputs/: past records, left alone)."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"tests/(" + "|".join(re.escape(o) for o in sorted(moves, key=len, reverse=True)) + r")(?![\w])")
    changed = []
    for name in files:
        if name.startswith(("outputs/", ".git")) or name.endswith((".gguf", ".png", ".ipynb")):
            continue
        p = ROOT / name
        try:
            text = p.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        new = pattern.sub(lambda m: "tests/" + moves[m.group(1)], text)
        if new != text:
            p.write_text(new)
            changed.append(name)
    return changed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("check", "move", "split"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    if args.step == "split":  # before collecting: a moved file's paths must resolve from its new folder
        deepened = [p for t in TIERS for p in sorted((TESTS / t).glob("*.py")) if deepen(p)]
        for p in deepened:
            print(f"paths one folder deeper: {p.relative_to(ROOT)}")
    found = collect()
    moves = plan_moves(found)
    mixed = {p: t for p, t in found.items() if len(t) > 1}
    if args.step == "check":
        for src, dst in moves:
            print(f"move  {src.relative_to(ROOT)} -> {dst.relative_to(ROOT)}")
        for p, t in sorted(mixed.items()):
            print(f"split {p.relative_to(ROOT)}: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(t.items())))
        sys.exit(1 if moves or mixed else 0)
    if args.step == "move":
        for src, dst in moves:
            dst.parent.mkdir(exist_ok=True)
            tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(src.relative_to(ROOT))], cwd=ROOT,
                                     capture_output=True).returncode == 0
            if not tracked:  # a file put back by hand after a merge: git mv moves tracked files only
                git("add", str(src.relative_to(ROOT)))
            git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))
        print(f"moved {len(moves)} files; commit them alone, then run: .ci/tier_tests.py split")
        return
    if moves:
        sys.exit("files outside their tier's folder: run `.ci/tier_tests.py move` (and commit) first")
    renamed = {}
    for p, tiers in sorted(mixed.items()):
        for made in split(p, tiers):
            git("add", str(made.relative_to(ROOT)))
            print(f"split {p.relative_to(ROOT)} -> {made.relative_to(ROOT)}")
    for t in TIERS:
        for p in (TESTS / t).glob("*.py"):
            renamed[p.name] = f"{t}/{p.name}"
    for name in rename_references(renamed):
        print(f"references to the new places: {name}")


if __name__ == "__main__":
    main()
