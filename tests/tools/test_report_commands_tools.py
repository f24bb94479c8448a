"""The tools tier of tests/unit/test_report_commands.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import setup_missing

from lab.core import paths
from lab.records import report
from shared_report_commands import H200_RUN, _v100_run, pre_blocks


def _flags(command: str) -> tuple[str, list[str]]:
    """(tool, its flags) of a one-line command: the words before a pipe or redirection."""
    words = shlex.split(command, comments=True)
    cut = next((i for i, w in enumerate(words) if w in ("|", "&&", ";", "2>&1", ">", ">>")), len(words))
    words = words[:cut]
    tool = words[0].rsplit("/", 1)[-1] if words else ""
    return tool, [w.split("=")[0] for w in words[1:] if re.match(r"--?[A-Za-z]", w)]


@pytest.mark.tools
def test_every_llama_cpp_flag_in_the_reports_is_in_the_pinned_tools_help(tmp_path):
    run = tmp_path / H200_RUN.name
    shutil.copytree(H200_RUN, run)
    report.build(run)
    v100, _, _ = _v100_run(tmp_path / "v100")
    blocks = pre_blocks((run / "report.html").read_text()) + pre_blocks((v100 / "report.html").read_text())
    helps, checked = {}, 0
    for block in blocks:
        tool, flags = _flags(block)
        if not tool.startswith("llama-"):
            continue
        if tool not in helps:
            try:
                exe = paths.tool(tool)
            except paths.SetupMissing as exc:
                if tool in ("llama-server", "llama-bench"):
                    setup_missing(str(exc))
                continue  # a tool the CPU set-up does not build
            out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
            helps[tool] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))
        unknown = [f for f in flags if f not in helps[tool]]
        assert unknown == [], f"{tool} --help does not list {unknown} (in: {block})"
        checked += 1
    assert checked >= 3 and "llama-server" in helps
