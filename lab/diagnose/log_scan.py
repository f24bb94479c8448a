"""Scanning long logs fast: the lines of a text or a file that a regex matches, in bounded memory.

A 50 MB log has ~500,000 lines; trying ~160 case-insensitive regexes (or one alternation of them) on each
costs minutes in Python's re. Instead each pattern is reduced to the literal text every match must contain
(parsed from the regex itself), the block is lower-cased once, and str.find (C speed) locates the few lines
that can match; only those lines meet the regex. Patterns without such a literal are run over the block.
"""
from __future__ import annotations

import codecs
import re
from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from lab.core import cli

BLOCK_CHARS = 4 << 20  # a log is read and scanned in blocks of whole lines: memory stays bounded


def strip_ansi(text: str) -> str:
    """Terminal escapes and control characters removed (tracebacks in executed notebooks, coloured server logs,
    a hostile log's OSC 52 clipboard write): text, safe to print."""
    return cli.printable(text)


def _literal_runs(items) -> list[str]:
    from re import _constants as C  # the parsed form of a pattern (stable since Python 3.11)

    runs, cur = [], ""
    for op, av in items:
        if op is C.LITERAL:
            cur += chr(av)
            continue
        runs.append(cur)
        cur = ""
    runs.append(cur)
    return runs


MIN_GATE_CHARS = 2  # even "t4" is found far faster by str.find than by running the regex on every line


def _branch_literals(branches) -> tuple[str, ...] | None:
    lits = []
    for branch in branches:
        best = max(_literal_runs(list(branch)), key=len)
        if len(best) < MIN_GATE_CHARS:
            return None
        lits.append(best.lower())
    return tuple(lits)


@lru_cache(maxsize=4096)


def _gate(pattern: re.Pattern) -> tuple[str, ...] | None:
    """Lower-case literal strings, one of which every match of `pattern` contains; None when none can be
    read from the regex (the pattern is then run over the whole block)."""
    from re import _constants as C, _parser

    try:
        parsed = list(_parser.parse(pattern.pattern, pattern.flags))
    except Exception:  # noqa: BLE001 - an unusual pattern is simply not gated
        return None
    best = max(_literal_runs(parsed), key=len)
    if len(best) >= 4:
        return (best.lower(),)
    for op, av in parsed:  # a|b|c at the top, or (?:a|b|c) as one item of the sequence
        if op is C.BRANCH:
            return _branch_literals(av[1])
        if op is C.SUBPATTERN and len(av[-1]) == 1 and av[-1][0][0] is C.BRANCH:
            lits = _branch_literals(av[-1][0][1][1])
            if lits:
                return lits
    return (best.lower(),) if len(best) >= MIN_GATE_CHARS else None


@lru_cache(maxsize=4096)


def _multiline(pattern: re.Pattern) -> re.Pattern:
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


def candidate_lines(block: str, low: str, pattern: re.Pattern) -> Iterable[tuple[int, str]]:
    """(offset, line) of the lines of `block` that `pattern` matches."""
    gate = _gate(pattern)
    if gate is None:
        seen = -1
        for m in _multiline(pattern).finditer(block):
            start = block.rfind("\n", 0, m.start()) + 1
            if start != seen:
                seen = start
                end = block.find("\n", start)
                line = block[start:] if end < 0 else block[start:end]
                if pattern.search(line):
                    yield start, line
        return
    starts = set()
    for lit in gate:
        pos = low.find(lit)
        while pos >= 0:
            start = block.rfind("\n", 0, pos) + 1
            end = block.find("\n", pos)
            end = len(block) if end < 0 else end
            starts.add((start, end))
            pos = low.find(lit, end)
    for start, end in sorted(starts):
        line = block[start:end]
        if pattern.search(line):
            yield start, line


def text_blocks(text: str) -> Iterable[tuple[str, int]]:
    """A text as (block, number of its first line) pairs of whole lines."""
    pos, line = 0, 1
    while pos < len(text):
        end = text.find("\n", pos + BLOCK_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[pos:end], line
        line += text.count("\n", pos, end)
        pos = end


def file_blocks(source, stats: dict | None = None) -> Iterable[tuple[str, int]]:
    """A file (path or binary stream) as (block, first line number) pairs, read BLOCK_CHARS at a time,
    undecodable bytes replaced: the whole file is scanned however long it is, in bounded memory. `stats`,
    if given, receives bytes, lines and whether NUL bytes (binary data) were seen."""
    stats = {} if stats is None else stats
    stats.update(bytes=0, lines=0, binary=False)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest, line = "", 1
    opened = open(source, "rb") if isinstance(source, (str, Path)) else nullcontext(source)
    with opened as fh:
        while raw := fh.read(BLOCK_CHARS):
            stats["bytes"] += len(raw)
            stats["binary"] = stats["binary"] or b"\0" in raw
            text = rest + decoder.decode(raw)
            cut = text.rfind("\n")
            if cut < 0 and len(text) < 4 * BLOCK_CHARS:  # a very long line: keep reading (up to a cap)
                rest = text
                continue
            cut = len(text) - 1 if cut < 0 else cut
            block, rest = text[: cut + 1], text[cut + 1:]
            yield block, line
            line += block.count("\n")
        rest += decoder.decode(b"", final=True)
        if rest:
            yield rest, line
            line += rest.count("\n") + (not rest.endswith("\n"))
    stats["lines"] = line - 1
