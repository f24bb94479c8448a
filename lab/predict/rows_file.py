"""`lab predict --rows FILE.tsv`: the rows file read as a hostile user may write it, streamed, every refusal naming
the line and the cell.

A header row, then one set-up per line, cells separated by tabs. Lines end at "\\n" alone (a CR before it is
dropped): U+2028, U+2029 and U+0085 inside a cell are not line ends (they split 2 rows into 4, each answered with the
defaults). A cell is a finite number where the column takes a number (inf, NaN, 1e400 and "1_000" are not; a whole
number where it takes one), and holds no control or invisible character (ESC, BEL and CR from a cell reached the
terminal raw: an OSC 52 clipboard write, a CR-forged "predicted 999 tok/s"). A column the predictor does not know
is refused, the known ones listed, unless the user asks to ignore them (`ignore_unknown`); `comment`, `note`,
`notes` and a name starting with "#" are the user's own notes. Nothing a message echoes carries a control
character, and a header that is no header (the first line of /etc/shadow through a link) is not echoed at all.

The file is read line by line, each line at most MAX_LINE_BYTES and at most MAX_ROWS rows (a 10 MB cell, a 200 MB
file or 10^6 rows end in one clear error, in bounded memory and time, before anything is predicted). What is in
range for each number is the predictor's to say (lab.predict.card_speed.problems).
"""
from __future__ import annotations

import csv
import difflib
import math
import re
import stat
import unicodedata
from pathlib import Path

MAX_LINE_BYTES = 64 << 10  # a row of a dozen settings is ~100 bytes; csv's own field limit is 128 KiB
MAX_ROWS = 10_000  # each row is one prediction; more is a job for a script, not the command line
NOTE_COLUMNS = ("comment", "note", "notes")
# A plain decimal number: float() also takes "inf", "nan", "1_000" and " 12 ".
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?")
_COLUMN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,31}")


class RowsError(ValueError):
    """The rows file cannot be read as rows (missing, not a file, a bad header, too large): one line saying why."""


def shown(text: str, width: int = 40) -> str:
    """`text` as a message may echo it: control and invisible characters as \\uXXXX, at most `width` characters."""
    safe = "".join(f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text)
    return repr(safe if len(safe) <= width else safe[:width - 1] + "…")


def cell_value(name: str, text: str, kind: type):
    """A cell's value for its column's kind, or ValueError naming the column and what is wrong."""
    bad = next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(f"column {name}: holds a control or invisible character (U+{ord(bad):04X}); remove it")
    if kind is str:
        return text
    whole = kind is int
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"column {name}: {shown(text)} is not a {'whole ' if whole else ''}number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"column {name}: {shown(text)} is not a finite number")
    if whole:
        if value != int(value) or abs(value) > 2 ** 53:
            raise ValueError(f"column {name}: {shown(text)} is not a whole number")
        return int(value)
    return value


def _lines(path: Path):
    """(line number, text) of each line, split at "\\n" only, each at most MAX_LINE_BYTES, UTF-8 (a BOM dropped)."""
    with open(path, "rb") as fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise RowsError(f"{path}: line {n} is longer than {MAX_LINE_BYTES:,} bytes; a row is a few settings "
                                "(a cell that long is not one)")
            if b"\0" in raw:
                raise RowsError(f"{path}: line {n} holds a NUL byte: binary data, not tab-separated text")
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise RowsError(f"{path}: line {n} is not UTF-8 text (byte {exc.start}); save the file as UTF-8 "
                                "(a spreadsheet's 'UTF-16' export is not)") from None
            yield n, text.removesuffix("\n").removesuffix("\r")


def _header(path: Path, n: int, line: str, columns: dict, required: tuple, ignore_unknown: bool) -> list[str]:
    header = [h.strip().lower() for h in line.split("\t")]
    known = [h for h in header if h in columns]
    twice = sorted({h for h in known if known.count(h) > 1})
    missing = [c for c in required if c not in header]
    unknown = [h for h in header if h not in columns and h not in NOTE_COLUMNS and not h.startswith("#")]
    if unknown and all(not _COLUMN_NAME.fullmatch(h) for h in unknown) and not known:
        raise RowsError(f"{path}: line {n} is not a header of columns (not shown); the first line names the columns: "
                        f"{' '.join(columns)} (tab-separated)")
    if missing or twice or (unknown and not ignore_unknown):
        said = [f"no {', '.join(missing)} column"] if missing else []
        said += [f"column(s) {', '.join(twice)} twice"] if twice else []
        if unknown and not ignore_unknown:
            names = ", ".join(shown(h, 32) if _COLUMN_NAME.fullmatch(h) else "(a name that is no column's, not shown)"
                              for h in unknown[:5]) + (f", … {len(unknown)} in all" if len(unknown) > 5 else "")
            near = [f"{h} → {c}" for h in unknown[:5] if _COLUMN_NAME.fullmatch(h)
                    for c in difflib.get_close_matches(h, list(columns), n=1, cutoff=0.6)]
            said.append(f"unknown column(s) {names}" + (f" (did you mean {'; '.join(near)}?)" if near else "")
                        + "; --ignore-unknown reads the file without them, a `comment` column holds notes")
        raise RowsError(f"{path}: bad header on line {n}: " + "; ".join(said) + f" (tab-separated; known columns: "
                        f"{' '.join(columns)})")
    return header


def read_rows(path: str | Path, columns: dict, required: tuple = ("gpu",),
              ignore_unknown: bool = False) -> list[tuple[int, dict, str | None]]:
    """[(line number, {column: value} of the non-empty known cells, why the row is bad or None)] of a tab-separated
    file with a header row; `columns`: each column's kind (str, int, float). RowsError when the file is missing or not
    a regular file, a line is too long or not text, there are more than MAX_ROWS rows, or the header lacks a required
    column, names one twice or names one not in `columns` (unless `ignore_unknown`). Blank lines and lines starting
    with '#' are not rows."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError:
        mode = None
    if mode is None or not stat.S_ISREG(mode):
        raise RowsError(f"{p}: {'no such file' if mode is None else 'not a file'}; --rows takes a tab-separated "
                        "file with a header row")
    header, rows = None, []
    for n, line in _lines(p):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if header is None:
            header = _header(p, n, line, columns, required, ignore_unknown)
            continue
        if len(rows) >= MAX_ROWS:
            raise RowsError(f"{p}: more than {MAX_ROWS:,} rows (line {n}); split the file, each row is one prediction")
        rows.append((n, *_row(n, line, header, columns)))
    if header is None:
        raise RowsError(f"{p}: empty; the first line is the header: {' '.join(columns)} (tab-separated)")
    return rows


def _row(n: int, line: str, header: list[str], columns: dict) -> tuple[dict, str | None]:
    try:  # a spreadsheet's quoted cells read as it wrote them
        cells = next(csv.reader([line], delimiter="\t"))
    except csv.Error:  # a CR or NUL inside a cell: the cells as split, each then refused for it
        cells = line.split("\t")
    values, bad = {}, []
    for name, text in zip(header, cells):
        text = text.strip(" ")  # not str.strip(): U+0085, U+2028 and CR are whitespace to it, and refused here
        if name in columns and text:
            try:
                values[name] = cell_value(name, text, columns[name])
            except ValueError as exc:
                bad.append(str(exc))
    if len(cells) > len(header):
        bad.append(f"{len(cells)} cells under a header of {len(header)}")
    return values, (f"bad cell(s) on line {n}: " + "; ".join(bad) if bad else None)
