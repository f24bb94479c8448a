"""How the lab shows a table, in a notebook and in report.html: one helper, so both read alike.

Nothing is cut (cells wrap instead of ending in "…"), numbers carry 3 significant figures (or what the field
schema, lab/data/fields.yaml, gives the figure), byte counts read as KiB/MiB/GiB, keys read as words (a figure of
the schema with its unit), there is no index column, an empty table is one line ("not on
this profile"), and a wide table scrolls inside its own box instead of widening the page.

`install()` (called by `lab.core.session.start`) makes every pandas DataFrame a notebook shows go through
`frame_html`, so notebook cells stay `lab.x.table(...)` and still read like the report.
"""
from __future__ import annotations

import html
import json
import math
import re

from lab.core import fields
from lab.core.text import ELLIPSIS, clip  # noqa: F401 (the lab's one way to shorten text; set-up uses it too)

EMPTY = "not on this profile"
STATUS_COLOURS = {"pass": "#2ca02c", "ok": "#2ca02c", "warn": "#ff7f0e", "fail": "#d62728", "failed": "#d62728",
                  "skip": "#7f7f7f", "skipped": "#7f7f7f", "not-run": "#9fa8da", "error": "#d62728", "info": "#1f77b4",
                  "checks failed": "#d62728", "checks failed (allowed)": "#ff7f0e", "interrupted": "#d62728",
                  "plan": "#5c6bc0"}
STATUS_KEYS = ("status", "severity", "verdict")

# Keys whose words do not say it well enough on their own (everything else: underscores → spaces).
LABELS = {
    "tok_s": "tok/s", "gb_s": "GB/s", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "kv": "KV",
    "gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "ram": "RAM", "vram": "VRAM", "psu": "PSU", "nvml": "NVML",
    "nvlink": "NVLink", "pcie": "PCIe", "ecc": "ECC", "cuda": "CUDA", "llm": "LLM", "slo": "SLO", "ppl": "PPL",
    "kld": "KLD", "tdp": "TDP", "id": "ID", "url": "URL", "sha256": "SHA-256", "p50": "p50", "p99": "p99",
    "ctx": "context", "n": "n", "pct": "%", "bpw": "bits/weight", "mib": "MiB", "gib": "GiB", "ms": "ms",
    "np": "-np", "tg": "tg", "pp": "pp", "ngl": "-ngl", "tok/s": "tok/s", "GB/s": "GB/s",
}
# Words that are units: taken out of the label and written after it, "(ms)"; the cell holds the number.
UNIT_WORDS = {"tok/s": "tok/s", "GB/s": "GB/s", "ms": "ms", "gib": "GiB", "mib": "MiB", "gb": "GB", "pct": "%",
              "mhz": "MHz"}
END_UNIT_WORDS = {"s": "s", "w": "W", "c": "°C"}  # only as the last word ("health_s", "tdp_w")


# How the lab's own command is printed, for a user to paste in the lab's folder: the venv's python, so it runs outside an
# activated venv too (a bare `python -m lab` there is `ModuleNotFoundError: No module named 'papermill'`).
LAB_COMMAND = ".venv/bin/python -m lab"


def lab_command(args: str = "") -> str:
    """The lab's command line as the lab prints it: `lab_command("plan v100-32g-x1")` →
    '.venv/bin/python -m lab plan v100-32g-x1' (run in the lab's folder)."""
    return f"{LAB_COMMAND} {args}".rstrip()




def is_bytes_key(key) -> bool:
    """A figure in bytes by its name ("kv_bytes_total"): shown in KiB … TiB."""
    return bool(re.fullmatch(r"[a-z0-9_]+", str(key))) and "bytes" in str(key).split("_")


BYTE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def bytes_unit(values) -> str | None:
    """The one unit a row of byte counts is shown in (that of its largest value), so runs side by side read alike
    ("8.58 GiB" beside "0.88 GiB", not beside "900 MiB"); None when none is a number."""
    sizes = [abs(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return next((u for u, size in BYTE_UNITS if sizes and max(sizes) >= size), None) if sizes else None


def label(key: str) -> str:
    """'decode_ceiling_tok_s' → 'Decode ceiling (tok/s)', 'ttft_p50_ms' → 'TTFT p50 (ms)',
    'kv_bytes_per_token' → 'KV per token' (the cell says KiB … GiB); a key with spaces, '/' or '-' is kept as
    written (a run folder or a profile name: 'cpu-default/20261202T015031Z_95195b3a', never a field name)."""
    key = str(key)
    if re.search(r"[ /-]", key) or "_" not in key and not re.fullmatch(r"[a-z0-9]+", key):
        return key
    if key in LABELS:
        return LABELS[key]
    field = fields.get(key)
    if field is not None and field.streams is not None:  # a figure at a level: "output_throughput@8"
        return f"{label(key.partition('@')[0])}, {field.streams} stream{'s' if field.streams != 1 else ''}"
    if field is not None and field.label and field.stat is None:
        return field.label
    text = _words(key)
    unit = fields.unit(key)
    # a rate the name does not spell ("output_throughput" → "Output throughput (tok/s)")
    return f"{text} ({unit})" if unit and "/" in unit and not text.endswith(")") else text


def _words(key: str) -> str:
    # llama.cpp type names keep their underscore (q8_0, q4_k_m): protect them before splitting on "_"
    key = re.sub(r"(?i)(?<![a-z])(i?q\d)_(k_[sml]|\d|k|xs|nl)", lambda m: m.group(0).replace("_", "\0"), key)
    words = [w.replace("\0", "_") for w in key.replace("tok_s", "tok/s").replace("gb_s", "GB/s").split("_")]
    words = [w for w in words if w and w != "bytes"] or ["size"]
    unit = ""
    for i, w in enumerate(words):
        if w in UNIT_WORDS and len(words) > 1:
            unit = UNIT_WORDS[w]
            del words[i]
            break
    if not unit and len(words) > 1 and words[-1] in END_UNIT_WORDS:
        unit = END_UNIT_WORDS[words.pop()]
    text = " ".join(LABELS.get(w, w) for w in words)
    text = text[:1].upper() + text[1:]
    return f"{text} ({unit})" if unit else text


def _decimals(x: float, sig: int) -> int:
    """Decimal places that leave `sig` significant figures of x (negative: tens, hundreds …)."""
    return sig - int(math.floor(math.log10(abs(x)))) - 1


def sig3(x: float, sig: int = 3) -> str:
    """3 (or `sig`) significant figures, without exponents for everyday magnitudes: 141.23 → '141',
    0.71428 → '0.714', 4227.3 → '4,230'."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = _decimals(x, sig)
    if abs(x) < 1e-4:
        return f"{x:.{sig - 1}e}"
    rounded = round(x, digits)
    return f"{rounded:,.0f}" if digits <= 0 else f"{rounded:,.{digits}f}"


def rounded(value, key: str = "", sig: int | None = None):
    """A number as a table keeps it: `sig` significant figures, else the field schema's for `key` (lab/data/
    fields.yaml: its `decimals` or `sig`), else 3; counts (int), lists and dicts element by element, None and text unchanged. The one rounding of the
    lab's tables (records keep the raw values beside them)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [rounded(v, key, sig) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, k if fields.get(str(k)) else key, sig) for k, v in value.items()}
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return value  # counts (int) stay whole
    field = fields.get(key) if key else None
    if sig is None and field is not None and field.decimals is not None:
        digits = field.decimals
    else:
        digits = _decimals(value, sig or (field.sig if field else 3))
    out = round(value, digits)
    return int(out) if digits <= 0 else out


def human_bytes(n: float, unit: str | None = None) -> str:
    """Binary units, 3 significant figures: 262144 → '256 KiB', 18.4e9 → '17.1 GiB'; under a KiB a fraction stays
    (1.0625 → '1.0625 B')."""
    n = float(n)
    if unit is not None:  # a row's unit (bytes_unit)
        size = dict(BYTE_UNITS)[unit]
        return f"{sig3(n / size) if abs(n) >= size else f'{n / size:.3g}'} {unit}"
    for name, size in BYTE_UNITS:
        if abs(n) >= size:
            return f"{sig3(n / size)} {name}"
    if n != int(n):  # a per-element size with its block's scale: q8_0's 34 ÷ 32 = 1.0625 B, not "1 B"
        return f"{n:.4f}".rstrip("0") + " B"
    return f"{n:,.0f} B"


def fmt(value, key: str = "", missing: str = "—", unit: str | None = None) -> str:
    """One cell or summary value as text (not yet HTML-escaped); None reads as `missing`; `unit`: the KiB … TiB a
    byte count is shown in (a row's, `bytes_unit`), else its own."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and is_bytes_key(key):
        return human_bytes(value, unit)
    if isinstance(value, int):
        # counts read with separators; identifiers (ports, process ids) do not
        return str(value) if re.search(r"port|pid|year|index|^id$", str(key)) else f"{value:,}"
    if isinstance(value, float):
        field = fields.get(str(key)) if key else None
        if field is not None and field.decimals is not None:
            return f"{value:,.{field.decimals}f}"
        return sig3(value, field.sig if field else 3)
    if isinstance(value, dict):
        return "; ".join(f"{label(k)}: {fmt(v, k)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        if all(not isinstance(v, (dict, list)) for v in value):
            return ", ".join(fmt(v, key) for v in value) or "—"
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def badge(status) -> str:
    colour = STATUS_COLOURS.get(str(status), "#555")
    return f'<span class="badge" style="background:{colour};color:#fff;border-radius:3px;padding:0 .4rem">' \
           f"{html.escape(str(status))}</span>"


COMMAND_KEYS = ("command", "commands", "cmd", "shell")
LONG_CELL = 400  # characters: a longer cell shows its start and opens in place for the rest
BREAK_AFTER = re.compile(r"([/_.,=:;&?-])")


def breakable(text: str) -> str:
    """Escaped text whose long tokens (paths, URLs, flag lists) may wrap after a separator and, failing that,
    every 24 characters (<wbr>): a narrow column then wraps "records/01_hardware.json" at "/" instead of
    cutting a plain word ("Observe|d"), and never pushes the table wider than its box."""
    def token(t: str) -> str:
        if len(t) <= 16:
            return html.escape(t)
        parts = []
        for piece in BREAK_AFTER.split(t):
            parts += [html.escape(piece[i:i + 24]) for i in range(0, len(piece), 24)] or [""]
        return "<wbr>".join(p for p in parts if p)
    return "".join(token(t) if not t.isspace() else t for t in re.split(r"(\s+)", text))


_MARKDOWN_SIGNS = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:&\"'=])")


# A command or code token wraps only at spaces: "-DGGML_CUDA=ON" broken after its "-" reads as two words and is typed
# wrong. A token longer than `whole` (a URL, a path) may also wrap after "/" or "=", a piece of it still longer after
# another separator (, _ . : ; & ?), never at "-"; what is still longer (a hash) is cut every `whole` characters.
# Copying the block gives the text as it is (spans and <wbr> add no characters).
WHOLE_TOKEN = 60
CODE_BREAKS = (re.compile(r"(?<=[/=])(?=[^/])"), re.compile(r"(?<=[,_.:;&?])"))
NO_BREAK_INSIDE = re.compile(r"[\w.,:=$@'\"+]+")  # a browser wraps such a token nowhere inside: no span needed
NOWRAP = '<span style="white-space:nowrap">'


def code_html(text: str, whole: int = WHOLE_TOKEN) -> str:
    """Escaped code or command text whose tokens wrap only at spaces (see WHOLE_TOKEN)."""
    out = []
    for t in re.split(r"(\s+)", str(text)):
        if not t or t.isspace():
            out.append(t)
            continue
        if len(t) <= whole and NO_BREAK_INSIDE.fullmatch(t):
            out.append(html.escape(t))
            continue
        pieces = [t]
        for breaks in CODE_BREAKS:
            pieces = [q for p in pieces for q in (breaks.split(p) if len(p) > whole else [p]) if q]
        pieces = [p[i:i + whole] for p in pieces for i in range(0, len(p), whole)]
        out.append("<wbr>".join(f"{NOWRAP}{html.escape(p)}</span>" for p in pieces))
    return "".join(out)


def markdown_text(value) -> str:
    """A string a server sent (a version, a model name, an error), put into Markdown the lab writes, as the text it
    is: every sign Markdown or HTML reads backslash-escaped (CommonMark escapes any ASCII punctuation), line breaks
    made spaces, so an `/api/version` of `<img src=x onerror=…>` or `![x](http://…)` shows as those characters in
    a notebook's Markdown output and in report.html, never as an element or a remote image."""
    return _MARKDOWN_SIGNS.sub(r"\\\1", " ".join(str(value).split()))


def inline_code(text: str) -> str:
    """Plain text with Markdown `code` spans (the fixes and reasons the lab's data writes) as HTML."""
    out = []
    for i, part in enumerate(re.split(r"`([^`\n]+)`", text)):
        out.append(f"<code>{code_html(part, 24)}</code>" if i % 2 else breakable(part))
    return "".join(out)


def _cell(key, value) -> str:
    if str(key).lower() in STATUS_KEYS and isinstance(value, str) and value in STATUS_COLOURS:  # a list is not hashable
        return badge(value)
    text = fmt(value, key)
    if str(key).lower() in COMMAND_KEYS and value not in (None, "", []):
        # one command per block, each copyable as it is (a list, or lines of one string)
        lines = value if isinstance(value, (list, tuple)) else str(value).splitlines()
        return "".join(f'<pre class="cmd" style="{PRE_STYLE}">{code_html(str(line))}</pre>'
                       for line in lines if str(line).strip())
    if len(text) > LONG_CELL:
        cut = text.rfind(" ", 0, 200)
        cut = cut if cut > 100 else 200
        # a long text keeps its column at least 12rem wide: squeezed to the cells' 3rem minimum by its neighbours, a
        # source's "--no-mtp" was drawn "m|tp" over two lines (report check, 07's findings table, 9 columns at 1400 px)
        return (f'<details style="min-width:12rem"><summary>{inline_code(text[:cut])}<i> (more)</i></summary>'
                f"{inline_code(text[cut:])}</details>")
    return inline_code(text)


TABLE_STYLE = ("border-collapse:collapse;font-size:.88rem;margin:.4rem 0")
CELL_STYLE = ("border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top;"
              "white-space:normal;overflow-wrap:break-word;min-width:3rem;max-width:40rem")
PRE_STYLE = ("margin:0 0 .2rem;padding:.15rem .3rem;background:#f6f8fa;white-space:pre-wrap;"
             "overflow-wrap:anywhere;font-size:.82rem")


def header_lines(key) -> list[str]:
    """A column's header as the lines it may wrap into: a run's "profile/run id" (lab compare) breaks at its "/" only,
    never inside the run id ("20261207T192950Z_|3b9fb951")."""
    text = label(key)
    if " " not in text and "/" in text.strip("/"):
        head, _, tail = text.rpartition("/")
        return [head + "/", tail]
    return [text]


def header_html(key) -> str:
    return "<wbr>".join(f"{NOWRAP}{html.escape(part)}</span>" if len(header_lines(key)) > 1 else html.escape(part)
                        for part in header_lines(key))


def rows_html(rows: list[dict], empty: str = EMPTY) -> str:
    """Rows (dicts) as one HTML table in a box that scrolls sideways when it is wider than the page."""
    rows = _key_value_rows([r for r in rows if r])
    if not rows:
        return f'<p class="lab-empty" style="color:#777">{html.escape(empty)}</p>'
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f'<th style="{CELL_STYLE};background:#f4f4f4">{header_html(c)}</th>' for c in cols)
    body = "".join("<tr>" + "".join(f'<td style="{CELL_STYLE}">{_cell(c, r.get(c))}</td>' for c in cols) + "</tr>"
                   for r in rows)
    return (f'<div class="lab-table" style="overflow-x:auto;max-width:100%">'
            f'<table style="{TABLE_STYLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')


def _plain(value):
    """pandas/numpy values → plain Python, so fmt() sees ints, floats and None."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


KEY_COLUMNS = ("field", "key", "result", "what", "quantity")


def _key_value_rows(rows: list[dict]) -> list[dict]:
    """A (field, value) table of snake_case keys: the key reads as words and the value gets the key's unit
    (a 'device_bytes' row shows GiB, not 4,294,967,296)."""
    cols = list(rows[0]) if rows else []
    if len(cols) < 2 or str(cols[0]).lower() not in KEY_COLUMNS:
        return rows
    out = []
    for r in rows:
        k = r.get(cols[0])
        if isinstance(k, str) and re.fullmatch(r"[a-z0-9_]+", k):
            r = {**r, cols[0]: label(k), cols[1]: fmt(r.get(cols[1]), k)}
        out.append(r)
    return out


def frame_rows(frame) -> list[dict]:
    """A DataFrame's rows as dicts (its index dropped: positions are not data)."""
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def frame_html(frame) -> str:
    return rows_html(frame_rows(frame))


def as_rows(data) -> list[dict]:
    """DataFrame, list of dicts, or one dict (→ a two-column 'what / value' table)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        return frame_rows(data)
    if isinstance(data, dict):
        return [{"what": label(k), "value": fmt(v, k)} for k, v in data.items()]
    return [dict(r) for r in (data or [])]


class Table:
    """What `show()` returns: HTML in a notebook, aligned text in a terminal."""

    def __init__(self, rows: list[dict], empty: str = EMPTY):
        self.rows, self.empty = rows, empty

    def _repr_html_(self) -> str:
        return rows_html(self.rows, self.empty)

    def __repr__(self) -> str:
        if not self.rows:
            return self.empty
        cols = list(dict.fromkeys(k for r in self.rows for k in r))
        return "\n".join(" | ".join(fmt(r.get(c), c) for c in cols) for r in [{c: label(c) for c in cols}] + self.rows)


def show(data, empty: str = EMPTY) -> Table:
    """Any table-like value, shown the lab's way (see the module docstring)."""
    return Table(as_rows(data), empty)


def install() -> None:
    """Inside a notebook kernel: every DataFrame renders with `frame_html`, nothing is truncated in text
    either, and progress bars stay out of executed notebooks (they are noise in a saved file)."""
    import pandas as pd

    for option, value in (("display.max_colwidth", None), ("display.max_rows", None),
                          ("display.max_columns", None), ("display.width", 10_000)):
        pd.set_option(option, value)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, frame_html)
