"""The tools tier of tests/unit/test_printed_commands.py (what these tests check, and why, is that file's docstring):
the printed commands parsed and run by a real bash in a clean environment (`env -i`)."""
import os
import subprocess

import pytest

from lab.core import profiles
from lab.diagnose import knowledge_base
from lab.records import answer, report_commands
from lab.serving import byhand
from shared_printed_commands import GPU_LLAMA, pre_blocks

pytestmark = pytest.mark.tools
BASH = "/bin/bash"


def bash_n(script: str) -> subprocess.CompletedProcess:
    """`bash -n` (parse only) in a clean environment."""
    return subprocess.run(["env", "-i", BASH, "-n"], input=script, capture_output=True, text=True, timeout=30)


# the profiles with a "Run this" box (lab/data/routes.yaml covers them); the others have none to run. Chosen here,
# not skipped: in CI a skip is a failure (tests/conftest.py)
WITH_ROUTES = [p for p in GPU_LLAMA if answer.what_to_run(p) is not None]


@pytest.mark.parametrize("prof", WITH_ROUTES, ids=lambda p: p.name)
def test_the_run_this_box_runs_in_a_clean_shell_and_fails_loudly(prof, tmp_path):
    run = answer.what_to_run(prof)
    box = run["command"]
    assert bash_n(box).returncode == 0, bash_n(box).stderr
    # a stand-in lab folder under a clean $HOME (the box's `export LAB="$HOME/llm-lab"`)
    lab = tmp_path / "llm-lab"
    (lab / ".venv" / "bin").mkdir(parents=True)
    (lab / "bin").mkdir()
    fake_python = lab / ".venv" / "bin" / "python"
    fake_python.write_text(f'#!{BASH}\n[ "$*" = "-m lab.core.paths llama-server" ] && echo "{lab}/bin/llama-server"\n')
    server = lab / "bin" / "llama-server"
    server.write_text(f'#!{BASH}\necho "$*" > "{tmp_path}/argv"\necho "error: no GPU here"\nexit 1\n')
    for f in (fake_python, server):
        f.chmod(0o755)
    done = subprocess.run(["env", "-i", f"HOME={tmp_path}", f"PATH={os.defpath}", BASH, "-c", box],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, (done.stdout, done.stderr)  # the server's failure, not tee's 0
    argv = (tmp_path / "argv").read_text()
    assert "-m " in argv and prof.model_file.split("/")[-1] in argv
    assert "error: no GPU here" in (lab / "server.log").read_text()


@pytest.mark.parametrize("prof", GPU_LLAMA, ids=lambda p: p.name)
def test_the_byhand_track_parses_in_a_clean_shell(prof):
    script = byhand.script(prof)
    assert bash_n(script).returncode == 0, bash_n(script).stderr


@pytest.mark.parametrize("name", ["cpu-default", "v100-32g-x1", "v100-32g-x2-nvlink"])
def test_each_block_of_the_reports_commands_parses(name):
    for b in pre_blocks(report_commands.section(profiles.load(name))):
        assert bash_n(b).returncode == 0, (b, bash_n(b).stderr)


def test_doctors_commands_parse():
    for e in knowledge_base.load_kb():
        for c in e.commands:
            assert bash_n(c).returncode == 0, (e.id, c, bash_n(c).stderr)
