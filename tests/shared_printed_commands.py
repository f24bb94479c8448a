"""What tests/unit/test_printed_commands.py and its tools tier share: the GPU llama.cpp profiles, and the check that a
list of shell lines reads no variable before one of them (or the shell) sets it."""
import html
import re

from lab.records import answer
from lab.serving import byhand

GPU_LLAMA = [p for p in answer.gpu_profiles() if p.engine in ("llama.cpp", "llama-cpp-python")]


def unset_before_use(lines: list[str]) -> list[tuple[str, str]]:
    """(variable, line) for each variable a line reads before any line up to it sets it."""
    seen, missing = set(byhand.SHELL_GIVES), []
    for line in lines:
        seen |= byhand.variables_set(line)
        code = "" if line.lstrip().startswith("#") else line.split("  #", 1)[0]
        code = re.sub(r"'[^']*'", "", code)  # single quotes do not expand
        missing += [(v, line) for v in byhand.variables_used(code) if v not in seen]
    return missing


def pre_blocks(page: str) -> list[str]:
    """The text of each <pre> block of a page, as a reader copies it."""
    return [html.unescape(re.sub(r"<[^>]+>", "", b)).strip() for b in re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)]
