"""report.html carries every command a reader must type, one per <pre> block, and every flag of a llama.cpp tool
in those blocks is one the pinned tool's --help lists (the tools the set-up built, in the cache)."""
import html
import re
import shlex
import shutil
import subprocess

import pytest

from lab.core import evidence, paths, profiles
from lab.core.paths import ROOT
from lab.records import answer, manifest, report, report_commands
from lab.serving import byhand, byhand_choices

H200_RUN = ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936"  # committed evidence from the H200


def pre_blocks(page: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", b)).strip() for b in re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)]


def _v100_run(tmp_path):
    """A GPU profile's run on a box without its GPU: notebook 04 planned the command, 07 found two problems
    whose fixes are two commands each."""
    prof_path = profiles.resolve("v100-32g-x1")
    prof = profiles.load(prof_path)
    run = evidence.new_run_dir(prof.name, tmp_path)
    shell = byhand.server_command(prof).split(" 2>&1")[0]
    evidence.write_record(run, "04_serve", {"title": "Serve", "summary": {"skipped": "no V100 here"},
                                            "command": {"shell": shell}}, prof_path)
    evidence.write_record(run, "07_troubleshooting", {"title": "Troubleshooting", "summary": {}, "findings": [
        {"severity": "error", "entry_id": "no-kernel-image", "title": "no kernel image", "fix": "rebuild with `sm_70`",
         "evidence": "CUDA error: no kernel image is available for execution on the device " + "x " * 300,
         "commands": "cmake --build build -j\nllama-server -m MODEL.gguf -ngl 999 -c 8192"}]}, prof_path)
    manifest.write(run, prof, prof_path, evidence.utc_now(), [])
    report.build(run)
    return run, prof, shell


def test_a_gpu_report_carries_the_track_the_server_line_and_separate_fix_commands(tmp_path):
    run, prof, shell = _v100_run(tmp_path)
    blocks = pre_blocks((run / "report.html").read_text())
    wanted = [c for step in byhand.steps(prof) for c in step.commands] + report_commands.on_card(prof) + [shell]
    assert [c for c in wanted if c not in blocks] == []
    # the finding's two commands are two blocks, never one joined line
    assert "cmake --build build -j" in blocks and "llama-server -m MODEL.gguf -ngl 999 -c 8192" in blocks
    assert not [b for b in blocks if "\n" in b], "one command per block"
    page = (run / "report.html").read_text()
    assert "machine.;" not in page and "<code>sm_70</code>" in page


def test_the_cpu_report_says_how_to_run_it_again_and_folds_the_seeds_card():
    text = report_commands.section(profiles.load("cpu-default"))
    card = byhand_choices.card_profile(profiles.load("cpu-default"))
    assert "<pre class='cmd'>make run</pre>" in text and f"python3 -m lab run --profile {card.name}" in text
    assert text.count("<details class='table'>") == 1


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
                    pytest.skip(str(exc))
                continue  # a tool the CPU set-up does not build
            out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
            helps[tool] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))
        unknown = [f for f in flags if f not in helps[tool]]
        assert unknown == [], f"{tool} --help does not list {unknown} (in: {block})"
        checked += 1
    assert checked >= 3 and "llama-server" in helps


def test_the_report_finds_the_runs_profile():
    assert answer.profile_for_run(H200_RUN).gpu_count == 1
