"""Which of a record's charts report.html draws, and how: a chart only where it carries information.

A record keeps every chart its notebook drew (plotly JSON). The report re-draws them, but a reader gains
nothing from some, so `curate(figure)` says what to do with each, as data:

- a bar chart of counts by status or severity (pass/warn/fail/skip, error/warn/info): the section's one-line
  count says the same in one line → ("text", "the counts");
- traces whose values are all missing (GPU energy on a machine without NVML) are left out, and a panel left with
  nothing to draw goes with them; their "not measured: why" note (an annotation) becomes text under the title,
  whole; nothing left at all → ("text", that note);
- a chart holding only its guide lines (the y = x diagonal of "prediction vs measured" in a plan-mode run, which
  measured nothing) → ("text", its "not measured" note, or "nothing measured");
- one measured point (a tuning run that measured only its baseline) → ("text", the point, in words);
- log axes get ticks at 1-2-5 steps (or at the data's own x values, when there are few, none too close to the one
  before) with short labels, instead of plotly's 2…9 minor labels between decades; a linear axis of whole numbers
  (concurrency) gets whole-number ticks at its values;
- a marker colour scale whose values are all one (a plan run's speeds) goes, with a note.

Pure: figure dict in, (kind, figure or text, notes) out; no plotly import.
"""
from __future__ import annotations

import math
import re

from lab.core import display

COUNT_CATEGORIES = {"pass", "warn", "fail", "skip", "not-run", "error", "info", "ok"}
CHECK_STATUSES = {"pass", "warn", "fail", "skip", "not-run"}  # a plan-mode run's checks are "not-run"


def _ys(trace: dict) -> list:
    return list(trace.get("y") or [])


def _measured(trace: dict) -> list:
    return [y for y in _ys(trace) if isinstance(y, (int, float)) and not (isinstance(y, float) and math.isnan(y))]


def is_count_chart(fig: dict) -> bool:
    """Bars of how many checks or findings ended in each status/severity."""
    data = fig.get("data") or []
    return bool(data) and all(t.get("type") == "bar" and set(map(str, t.get("x") or [])) <= COUNT_CATEGORIES
                              and set(map(str, t.get("x") or [])) for t in data)


def is_status_chart(fig: dict) -> bool:
    """A count chart of checks' statuses: the section's Checks line already counts them."""
    return is_count_chart(fig) and all(set(map(str, t.get("x") or [])) <= CHECK_STATUSES for t in fig.get("data") or [])


def count_line(fig: dict) -> str:
    """The counts a count chart draws, in one line ('this run: 2 warn; reproduced here: 5 error, 1 warn')."""
    parts = []
    for t in fig.get("data") or []:
        counts = ", ".join(f"{display.fmt(y)} {x}" for x, y in zip(t.get("x") or [], _ys(t)) if y)
        parts.append(f"{t['name']}: {counts or 'none'}" if t.get("name") else counts or "none")
    return "; ".join(parts)


def _axis_suffix(ref: str | None) -> str:
    """'x2' → '2', 'x' / None → '' (plotly's layout keys: xaxis, xaxis2 …)."""
    return (ref or "x")[1:]


def _short(v: float) -> str:
    """A tick label: 4096 → '4k' (token counts are powers of two), 20000 → '20k', 0.05 → '0.05', 2 → '2' (a count of
    streams is never '2.00')."""
    if float(v).is_integer() and abs(v) < 1000:
        return str(int(v))
    if v >= 1024 and float(v).is_integer() and int(v) & (int(v) - 1) == 0:
        return f"{int(v) // 1024:,}k"
    if abs(v) >= 1000:
        k = v / 1000
        return f"{display.sig3(k).rstrip('0').rstrip('.') if '.' in display.sig3(k) else display.sig3(k)}k"
    return display.sig3(v)


def log_ticks(values: list[float]) -> list[float]:
    """Ticks for a log axis over these values: the values themselves when they are few, else 1-2-5 steps."""
    vals = sorted({float(v) for v in values if isinstance(v, (int, float)) and v > 0})
    if not vals:
        return []
    if len(vals) <= 8:  # the values themselves, but two too close to read apart (4.19 over 3.90) keep the first
        span = max(math.log10(vals[-1] / vals[0]), 0.3)
        kept = [vals[0]]
        for v in vals[1:]:
            if math.log10(v / kept[-1]) >= span / 12:
                kept.append(v)
        return kept
    lo, hi = vals[0], vals[-1]
    ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    inside = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5]
    return inside if len(inside) <= 12 else [t for t in inside if str(t).lstrip("0.").startswith("1")]


def _tidy_linear_axes(fig: dict) -> None:
    """A linear axis whose values are all whole numbers (concurrent streams, slots) gets ticks at those values, as
    whole numbers: plotly's own put "1.00 2.00 4.00" on a concurrency axis, or ticks at 1.5."""
    layout = fig.setdefault("layout", {})
    for letter in "xy":
        keys = {f"{letter}axis{_axis_suffix(t.get(f'{letter}axis'))}" for t in fig.get("data") or []}
        for key in keys:
            axis = layout.setdefault(key, {})
            if axis.get("type") in ("log", "category", "date") or axis.get("tickvals"):
                continue
            values = [v for t in fig.get("data") or [] if f"{letter}axis{_axis_suffix(t.get(f'{letter}axis'))}" == key
                      for v in (t.get(letter) or [])]
            nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if nums and len(nums) == len(values) and all(float(v).is_integer() for v in nums) and len(set(nums)) <= 12:
                ticks = sorted(set(nums))
                axis.update(tickmode="array", tickvals=ticks, ticktext=[_short(t) for t in ticks])


def _one_colour(fig: dict) -> list[str]:
    """A marker colour scale whose values are all the same (a plan run's generation speed, 0 for every quant) says
    nothing and drew a −0.4…0.4 colour bar: the scale goes, a note says why."""
    notes = []
    for t in fig.get("data") or []:
        marker = t.get("marker") if isinstance(t.get("marker"), dict) else {}
        colours = marker.get("color")
        if isinstance(colours, list) and colours and all(isinstance(c, (int, float)) for c in colours) \
                and len(set(colours)) == 1:
            what = ((marker.get("colorbar") or {}).get("title") or {})
            what = what.get("text") if isinstance(what, dict) else what
            marker.update(color="#1f77b4", showscale=False)
            marker.pop("colorscale", None)
            marker.pop("colorbar", None)
            notes.append(f"colour ({what or 'marker'}): {display.fmt(colours[0])} for every point, so no colour scale"
                         + (" (not measured)" if colours[0] == 0 else ""))
    return notes


def _tidy_log_axes(fig: dict) -> None:
    layout = fig.setdefault("layout", {})
    for key, axis in list(layout.items()):
        if not re.fullmatch(r"[xy]axis\d*", key) or not isinstance(axis, dict) or axis.get("type") != "log":
            continue
        letter, suffix = key[0], key[5:]
        values = [v for t in fig.get("data") or [] if _axis_suffix(t.get(f"{letter}axis")) == suffix
                  for v in (t.get(letter) or [])]
        ticks = log_ticks(values) if not axis.get("tickvals") else [float(v) for v in axis["tickvals"]]
        if ticks:
            axis.update(tickmode="array", tickvals=ticks, ticktext=[_short(t) for t in ticks])


def is_guide(trace: dict) -> bool:
    """A line drawn to read the data against, not data: marked so (meta "guide"), or a straight y = x diagonal of two
    points (records written before the mark)."""
    if trace.get("meta") == "guide":
        return True
    x, y = list(trace.get("x") or []), _ys(trace)
    return (trace.get("type", "scatter") == "scatter" and trace.get("mode") == "lines" and len(x) == 2 and x == y
            and x[0] != x[1])


def _notes(fig: dict) -> list[str]:
    return [str(a.get("text")) for a in (fig.get("layout") or {}).get("annotations") or []
            if "not measured" in str(a.get("text") or "")]


def _drop_unmeasured(fig: dict) -> list[str]:
    """Leave out the traces with no value and the panels left empty; return the notes that said why."""
    data = fig.get("data") or []
    kept = [t for t in data if _measured(t) or t.get("type") not in ("scatter", "bar")]
    if len(kept) == len(data):
        return []
    gone = [t.get("name") or "a series" for t in data if t not in kept]
    layout = fig.setdefault("layout", {})
    used = {_axis_suffix(t.get("xaxis")) for t in kept}
    empty = {_axis_suffix(t.get("xaxis")) for t in data} - used
    notes = []
    for a in list(layout.get("annotations") or []):
        text = str(a.get("text") or "")
        ref = str(a.get("xref") or "").split()[0]
        in_empty = ref.startswith("x") and _axis_suffix(ref) in empty
        if "not measured" in text or in_empty:
            layout["annotations"].remove(a)
            if "not measured" in text:
                notes.append(text)
    for suffix in empty:  # the empty panel goes; its subplot title (a paper annotation over its domain) with it
        dom = (layout.get(f"xaxis{suffix}") or {}).get("domain") or [0, 1]
        layout["annotations"] = [a for a in layout.get("annotations") or []
                                 if not (a.get("xref") == "paper" and dom[0] <= float(a.get("x", -1)) <= dom[1])]
        layout.pop(f"xaxis{suffix}", None)
        layout.pop(f"yaxis{suffix}", None)
    if empty and used:  # what is left takes the whole width
        for suffix in used:
            layout.setdefault(f"xaxis{suffix}", {})["domain"] = [0, 1]
            layout.setdefault(f"yaxis{suffix}", {})["anchor"] = f"x{suffix}"
    fig["data"] = kept
    return notes or [f"not measured: {', '.join(gone)}"]


def curate(figure: dict) -> tuple[str, object, list[str]]:
    """('chart', figure, notes) to draw, or ('text', what it says, notes) instead of a chart."""
    import copy

    fig = copy.deepcopy(figure)
    if is_count_chart(fig):
        return "text", count_line(fig), []
    if fig.get("data") and all(is_guide(t) for t in fig["data"]):
        return "text", "; ".join(_notes(fig)) or "nothing measured: the chart would hold only its guide line", []
    notes = _drop_unmeasured(fig)
    points = {(x, y) for t in fig.get("data") or [] if not is_guide(t)
              for x, y in zip(t.get("x") or [], _ys(t)) if y is not None}
    if not fig.get("data") or not points:
        return "text", "; ".join(notes) or "nothing measured", []
    if len(points) == 1:
        (x, y), = points
        layout = fig.get("layout") or {}

        def title(k):
            t = (layout.get(k) or {}).get("title")
            return (t.get("text") if isinstance(t, dict) else t) or k[0]
        return "text", (f"one point measured ({title('xaxis')} {display.fmt(x)}, {title('yaxis')} {display.fmt(y)}): "
                        "a chart needs two; the section's table has it"), notes
    notes += _one_colour(fig)
    _tidy_log_axes(fig)
    _tidy_linear_axes(fig)
    return "chart", fig, notes
