"""Subprocess hygiene: the lab runs programs from argv lists only, never through a shell, so a path or a
value from a profile is never interpreted by one. Figure: modules scanned / modules clean."""
import ast
from pathlib import Path

from conftest import ROOT, record_figure

SHELL_CALLS = {"system", "popen", "getoutput", "getstatusoutput", "create_subprocess_shell"}


def _shell_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{path.name}:{node.lineno}: shell={ast.unparse(kw.value)}")
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in SHELL_CALLS and ast.unparse(func.value) in (
                    "os", "subprocess", "asyncio"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(func)}()")
    return found


def test_no_shell_anywhere_in_lab():
    modules = sorted((ROOT / "lab").rglob("*.py"))
    dirty = {m.name: _shell_uses(m) for m in modules}
    dirty = {k: v for k, v in dirty.items() if v}
    text = "\n".join(x for v in dirty.values() for x in v)
    # a plain-text look too, for forms the AST check could miss (e.g. `from os import system`)
    for m in modules:
        src = m.read_text()
        for needle in ("shell=True", "os.system(", "from os import system", "os.popen("):
            if needle in src:
                text += f"\n{m.name}: {needle}"
    record_figure("subprocess hygiene (lab/ modules without a shell)", len(modules), len(modules) - len(dirty))
    assert not text, text


def test_the_scanner_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os, subprocess\nsubprocess.run('ls', shell=True)\nos.system('ls')\nsubprocess.getoutput('x')\n")
    assert len(_shell_uses(bad)) == 3
