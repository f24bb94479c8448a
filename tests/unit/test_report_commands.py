"""report.html carries every command a reader must type, one per <pre> block, and every flag of a llama.cpp tool
in those blocks is one the pinned tool's --help lists (the tools the set-up built, in the cache)."""
import re

from lab.core import profiles
from lab.records import answer, report_commands
from lab.serving import byhand, byhand_choices
from shared_report_commands import H200_RUN, _v100_run, pre_blocks


def test_a_gpu_report_carries_the_track_the_server_line_and_separate_fix_commands(tmp_path):
    run, prof, shell = _v100_run(tmp_path)
    blocks = pre_blocks((run / "report.html").read_text())
    wanted = [c for step in byhand.steps(prof) for c in step.commands] + report_commands.on_card(prof) + [shell]
    assert [c for c in wanted if c not in blocks] == []
    # the finding's two commands are two blocks, never one joined line
    assert "cmake --build build -j" in blocks and "llama-server -m MODEL.gguf -ngl 999 -c 8192" in blocks
    # one command per block, but the answer's "Run this" box: one block that runs as pasted (it sets $LAB first)
    assert not [b for b in blocks if "\n" in b and not b.startswith('export LAB=')], "one command per block"
    page = (run / "report.html").read_text()
    assert "machine.;" not in page and "<code>sm_70</code>" in page
    # every token with a "-" (a flag, a path) is kept whole on the screen (`-DCMAKE_CUDA_COMPILER=` wrapped after its
    # "-" at 800 px): outside the spans that keep tokens whole, no block holds a "-"
    outside = [re.sub(r'<span style="white-space:nowrap">[^<]*</span>', "", b)
               for b in re.findall(r"<pre class='cmd'>(.*?)</pre>", page, re.S)]
    assert outside and [b for b in outside if "-" in b] == []


def test_the_cpu_report_says_how_to_run_it_again_and_folds_the_seeds_card():
    text = report_commands.section(profiles.load("cpu-default"))
    card = byhand_choices.card_profile(profiles.load("cpu-default"))
    blocks = pre_blocks(text)
    assert "<pre class='cmd'>make run</pre>" in text and f".venv/bin/python -m lab run --profile {card.name}" in blocks
    assert text.count("<details class='table'>") == 1


def test_the_report_finds_the_runs_profile():
    assert answer.profile_for_run(H200_RUN).gpu_count == 1
