"""An owner's own measurements beside the public rows: `lab predict --rows-dataset FILE` (or a folder of them) reads
rows in the public-row format (lab.predict.public_speed.Row: what `.venv/bin/python -m lab share RUN_DIR` prints, or rows
written by hand with their URL and quote) and refits the lab's speed model on the public rows plus these, so an
owner's runs improve the answer for their card.

A file is YAML or JSON (a list of rows, a mapping with `rows:`, or one row) or TSV (a header row of Row's fields,
`lab share`'s TSV); a folder means every *.yaml, *.yml, *.json and *.tsv in it, in name order. Rows are validated as
the lab's own are, except that an unpublished run (source `lab-run:<run id>`) is accepted here.

`using(rows)` adds them to lab.predict.public_speed.load for the duration and clears the caches of what was fitted
from the dataset (the per-token model, the checked rows, the held-out validation), so every answer inside it
(`lab predict`, its --validate) comes from the refit; on leaving, the lab's own fit is back. The MTP step model's
verify ms stay lab/data/calibration.yaml's (mtp_step_model): only the per-token model is refitted.
"""
from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path

import yaml

from lab.core import display
from lab.predict import card_setup, public_speed, public_validate, roofline

SUFFIXES = (".yaml", ".yml", ".json", ".tsv")
LIST_FIELDS = ("flags", "samples")  # TSV cells that hold a list: space-separated words / numbers
MAX_BYTES = 4 << 20  # a rows file beyond 4 MiB is not a file of measurements


class RowsDatasetError(ValueError):
    """A --rows-dataset file or folder cannot be read as rows."""


def _tsv(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return []
    reader = csv.DictReader(lines, delimiter="\t")
    numbers = {n for n, f in public_speed.Row.model_fields.items() if f.annotation in (int, float, int | None,
                                                                                       float | None)}
    out = []
    for cells in reader:
        row = {}
        for name, text in cells.items():
            text = (text or "").strip()
            if not name or not text:
                continue
            if name in LIST_FIELDS:
                row[name] = [float(x) for x in text.split()] if name == "samples" else text.split()
            elif name in numbers:
                row[name] = float(text) if "." in text or "e" in text.lower() else int(text)
            elif name in ("speculative",):
                row[name] = json.loads(text)
            elif text in ("true", "false"):
                row[name] = text == "true"
            else:
                row[name] = text
        row.setdefault("speculative", None)  # an empty cell: no speculation (lab share writes none)
        out.append(row)
    return out


def _raw(path: Path) -> list[dict]:
    if path.stat().st_size > MAX_BYTES:
        raise RowsDatasetError(f"{path}: larger than {MAX_BYTES >> 20} MiB; a rows file holds measurements, not logs")
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".tsv":
        try:
            return _tsv(text)
        except (ValueError, json.JSONDecodeError) as exc:
            raise RowsDatasetError(f"{path}: a cell is not what its column holds ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RowsDatasetError(f"{path}: not YAML or JSON ({display.clip(' '.join(str(exc).split()), 200)})") from None
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        return data["rows"]
    if isinstance(data, dict) and "id" in data:
        return [data]
    if isinstance(data, list):
        return data
    raise RowsDatasetError(f"{path}: expected rows: a list, a mapping with 'rows:', or one row with an 'id' "
                           "(what `.venv/bin/python -m lab share RUN_DIR --json` prints)")


def read(path: str | Path) -> list[public_speed.Row]:
    """The rows of a file, or of every rows file in a folder, validated (public_speed.validate_rows, an unpublished
    run's source allowed). RowsDatasetError / PublicSpeedError name the file, row and field that is wrong."""
    p = Path(path).expanduser()
    if not p.exists():
        raise RowsDatasetError(f"{p}: no such file or folder; --rows-dataset takes a rows file (YAML, JSON or TSV, "
                               "as `.venv/bin/python -m lab share RUN_DIR` prints) or a folder of them")
    files = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file()) if p.is_dir() else [p]
    if not files:
        raise RowsDatasetError(f"{p}: a folder with no {', '.join(SUFFIXES)} file in it")
    rows: list[public_speed.Row] = []
    for f in files:
        try:
            rows += public_speed.validate_rows(_raw(f), str(f), unpublished_ok=True)
        except UnicodeError:
            raise RowsDatasetError(f"{f}: not UTF-8 text") from None
    ids = [r.id for r in rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise RowsDatasetError(f"{p}: row id(s) {', '.join(twice)} appear in more than one file; give each its own id")
    return rows


def _clear() -> None:
    roofline.per_token_model.cache_clear()
    card_setup.checked_rows.cache_clear()
    public_validate.validate_cached_clear()


@contextlib.contextmanager
def using(rows: list[public_speed.Row]):
    """Within the block, lab.predict.public_speed.load() returns the lab's rows + `rows`, and every fit is redone on
    them (see the module docstring)."""
    before = list(public_speed.EXTRA_ROWS)
    public_speed.EXTRA_ROWS[:] = before + list(rows)
    _clear()
    try:
        yield
    finally:
        public_speed.EXTRA_ROWS[:] = before
        _clear()


def refit_summary(rows: list[public_speed.Row], before: roofline.PerTokenModel) -> list[str]:
    """What the owner's rows changed, in a line each: how many rows entered the fit (public_speed.fit_points) and,
    for each calibration they touch, the fraction of datasheet bandwidth before and after."""
    after = roofline.per_token_model()
    fitted = {p["id"] for p in public_speed.fit_points()}
    used = [r for r in rows if r.id in fitted]
    lines = [f"--rows-dataset: {len(rows)} row(s) read, {len(used)} in the refit"
             + (f" ({', '.join(r.id for r in used)})" if used else " (a row enters the fit when it is llama.cpp, no "
                "speculation, a file size, shallower than 8,192 tokens, not on Windows: public_speed.fit_points)")]
    for key in sorted({public_speed.row_key(r) for r in used}):
        was = (f"{before.fraction_by_arch[key]:.3f}" if key in before.fraction_by_arch
               else f"FALLBACK {before.default_fraction:.3f}")
        lines.append(f"  {key}: fraction of datasheet bandwidth {was} -> {after.fraction_for(key):.3f}; fixed "
                     f"{before.fixed_for(public_speed.FAMILY, key):.2f} -> {after.fixed_for(public_speed.FAMILY, key):.2f} "
                     "ms/token")
    return lines


__all__ = ["RowsDatasetError", "read", "using", "refit_summary", "SUFFIXES"]
