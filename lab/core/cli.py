"""Terminal output of the lab's verbs: 100 columns at most, help with a description and examples.

`fit(text)` wraps every line over 100 columns under its own indentation (a continuation is indented 4 more), so
`lab plan` reads in a terminal and in a log; `text_table(rows)` is lab.core.display's table for a terminal, each
column wrapped to fit; `parser(...)` is an argparse parser whose help keeps its "examples:" block as written and
wraps the rest at 100 columns (or the terminal's width, when narrower).
"""
from __future__ import annotations

import argparse
import re
import shutil
import textwrap

WIDTH = 100
# Every terminal escape, not only colours: OSC (ESC ] … BEL or ESC \: OSC 52 writes the clipboard, OSC 8 makes links,
# OSC 0 sets the window title), DCS/SOS/PM/APC strings, CSI with any parameters, two-character escapes, their 8-bit
# C1 forms, and any other control character but tab and newline (a lone CR rewrites the line shown).
_ESCAPES = re.compile(r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without terminal escapes or control characters (tab and newline kept): what the lab prints of text it
    did not write (a log, a handed-over run folder's manifest and records) is safe for a terminal."""
    return _ESCAPES.sub("", text)


def fit(text: str, width: int = WIDTH) -> str:
    """Every line of `text` at most `width` columns: a longer one wraps under its own indentation."""
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                             break_on_hyphens=False)
    return "\n".join(out)


def text_table(rows: list[dict], width: int = WIDTH, gap: str = "  ") -> str:
    """Rows as aligned text within `width` columns: values read as the report shows them (lab.core.display.fmt:
    no raw dicts), a wide column wrapped over several lines instead of cut."""
    from lab.core import display

    if not rows:
        return display.EMPTY
    cols = list(dict.fromkeys(k for r in rows for k in r))
    heads = [display.header_lines(c) for c in cols]  # a run's "profile/run id" wraps at its "/" only
    cells = [[printable("".join(h)) for h in heads]] + [[printable(display.fmt(r.get(c), c)) for c in cols]
                                                        for r in rows]
    natural = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    room = width - len(gap) * (len(cols) - 1)
    widths = list(natural)
    least = [max(8, *(len(p) for p in h)) if len(h) > 1 else 8 for h in heads]
    while sum(widths) > room and any(w > m for w, m in zip(widths, least)):  # shrink the widest that can
        i = max((i for i in range(len(cols)) if widths[i] > least[i]), key=lambda i: widths[i])
        widths[i] -= 1
    lines = []
    for n, row in enumerate(cells):
        wrapped = [(heads[i] if n == 0 and len(heads[i]) > 1 and len(row[i]) > widths[i] else
                    textwrap.wrap(v, widths[i], break_on_hyphens=False) or [""]) for i, v in enumerate(row)]
        for k in range(max(len(w) for w in wrapped)):
            lines.append(gap.join((w[k] if k < len(w) else "").ljust(widths[i])
                                  for i, w in enumerate(wrapped)).rstrip())
        if n == 0:
            lines.append(gap.join("-" * w for w in widths))
    return "\n".join(lines)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help at ≤ 100 columns; an "examples:" block (the epilog) stays as written, one command a line."""

    def __init__(self, prog: str, **kwargs):
        kwargs.setdefault("width", min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))
        super().__init__(prog, **kwargs)

    def _fill_text(self, text, width, indent):
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        # argparse's own fill, without breaking at hyphens: ids and flags ("driver-legacy-branch") stay whole
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


def examples(*commands: str) -> str:
    """The epilog of a verb's --help: its examples, one command a line (each ≤ 100 columns)."""
    return "examples:\n" + "\n".join(f"  {c}" for c in commands)


def parser(prog: str, description: str, *commands: str) -> argparse.ArgumentParser:
    """A verb's parser as every verb has it: ≤ 100 columns, a description, and its examples under the options."""
    return argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter,
                                   epilog=examples(*commands))
