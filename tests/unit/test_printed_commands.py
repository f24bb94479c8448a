"""Every command the lab prints runs as printed: pasted into a fresh shell, every variable it reads is set before it
(by the block itself, an earlier step of the same track, or the shell), a pipe carries `set -o pipefail`, the lab
itself is `.venv/bin/python -m lab` (never a bare `python -m lab`, which outside the venv is `ModuleNotFoundError: No
module named 'papermill'`), and no command hides inside a comment. The tools tier
(tests/tools/test_printed_commands_tools.py) parses each with a real bash in a clean environment and runs the
report's "Run this" box against a stand-in lab folder: it sets $LAB and $LLAMA_BIN itself, reaches the server with
the profile's model, and ends 1 through `| tee` when the server fails (pipefail)."""
import re
from pathlib import Path

import pytest
from conftest import ROOT, cli_output

from lab.core import display, profiles
from lab.diagnose import knowledge_base
from lab.records import answer, report_commands
from lab.serving import byhand
from shared_printed_commands import GPU_LLAMA, pre_blocks, unset_before_use

@pytest.mark.parametrize("prof", GPU_LLAMA, ids=lambda p: p.name)
def test_the_run_this_box_sets_every_variable_it_uses_and_pipes_with_pipefail(prof):
    run = answer.what_to_run(prof)
    if run is None:
        pytest.skip(f"{prof.name}: no routes in lab/data/routes.yaml")
    box = run["command"]
    assert unset_before_use(box.splitlines()) == []
    assert box.splitlines()[0].startswith('export LAB="$HOME/llm-lab"')
    assert "set -o pipefail" in box and box.index("set -o pipefail") < box.index("| tee")


def test_a_variable_only_the_user_can_set_stops_the_block_with_its_name():
    box = byhand.runnable(['curl -H "Authorization: Bearer $LAB_API_KEY" http://127.0.0.1:8080/health'])
    assert box.splitlines()[0] == ': "${LAB_API_KEY:?set LAB_API_KEY first (the profile names it)}"'
    assert "pipefail" not in box and "LAB=" not in box


@pytest.mark.parametrize("prof", GPU_LLAMA, ids=lambda p: p.name)
def test_the_byhand_track_sets_its_variables_in_order_and_hides_no_command(prof):
    lines = byhand.script(prof).splitlines()
    assert unset_before_use(lines) == []
    comments = [ln for ln in lines if ln.lstrip().startswith("#")]
    # a command inside a comment cannot be pasted (the fastest route was printed "# or …: LLAMA_ARG… $LLAMA_BIN…")
    assert [c for c in comments if '"$LLAMA_BIN/' in c or " -m " in c and "--port" in c] == []
    if byhand.fastest_route(prof):
        assert [ln for ln in lines if not ln.startswith("#") and "--spec-type" in ln]
    served = [i for i, ln in enumerate(lines) if "| tee" in ln]
    assert served and all("set -o pipefail" in lines[:i] for i in served)


@pytest.mark.parametrize("name", ["cpu-default", "v100-32g-x1", "v100-32g-x2-nvlink"])
def test_the_reports_commands_section_sets_its_variables_in_order(name):
    blocks = pre_blocks(report_commands.section(profiles.load(name)))
    assert blocks and unset_before_use([ln for b in blocks for ln in b.splitlines()]) == []


def test_doctors_no_kernel_image_fix_is_the_labs_own_build():
    entries = {e.id: e for e in knowledge_base.load_kb()}
    fix = " ".join(entries["cuda-no-kernel-image"].commands)
    assert "LAB_CUDA_ARCH=70" in fix and "CUDACXX=" in fix and "make setup" in fix and "cmake -B" not in fix


BARE = re.compile(r"(?<![\w/.$])python3? -m lab(?![.\w])")


def printed_files() -> list[Path]:
    return ([p for p in (ROOT / "lab").rglob("*") if p.suffix in (".py", ".yaml", ".md") and p.is_file()]
            + sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "README.md", ROOT / "Makefile"])


def test_the_lab_is_never_printed_as_a_bare_python_m_lab():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for p in printed_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if BARE.search(line) and "a bare `python -m lab`" not in line]
    assert found == []


def test_the_verbs_help_names_the_venvs_python():
    rc, text = cli_output(["plan", "--help"])
    assert rc == 0 and f"usage: {display.LAB_COMMAND} plan" in text
    assert display.lab_command("plan x") == ".venv/bin/python -m lab plan x"


def test_notebook_04s_serving_half_sets_the_variables_its_steps_use():
    """Notebook 04 shows the by-hand track's serving half, whose variables the installation half sets."""
    text = byhand.markdown(profiles.load("v100-32g-x1"), part="serve")
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert blocks[0].startswith('export LAB="$HOME/llm-lab"')
    assert unset_before_use([ln for b in blocks for ln in b.splitlines()]) == []


def test_a_plan_runs_server_command_is_not_offered_as_a_line_for_the_card():
    from lab.records import report

    record = {"mode": "plan", "command": {"shell": "/root/.cache/llm-lab/llama.cpp/x-cpu/bin/llama-server -m /here/m.gguf"}}
    shown = report._command_html(record)
    assert "<pre" not in shown and "Run this" in shown
    assert "<pre" in report._command_html({**record, "mode": "measure"})
