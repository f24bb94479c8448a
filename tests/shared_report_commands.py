"""What the tiers of tests/unit/test_report_commands.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
import html
import re

from lab.core import evidence, profiles
from lab.core.paths import ROOT
from lab.records import manifest, report
from lab.serving import byhand


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
