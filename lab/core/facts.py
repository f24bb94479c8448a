"""The lab's sourced data: one YAML file per kind under lab/data/ (compat rules, GPU specs, model
configs, the seeds' claims, the troubleshooting knowledge base).

Every entry carries a `source` (a repository path, issue/PR, document, or a dated measurement on our
machines); `load()` refuses a file where an entry lacks one, so nothing unsourced reaches a user.
"""
from __future__ import annotations

from functools import lru_cache
import yaml

from lab.core.paths import DATA as DATA_DIR


class DataError(ValueError):
    """A data file under lab/data/ is malformed (a bug in the lab, not in the user's input)."""


@lru_cache(maxsize=None)
def load(name: str, list_key: str | None = None) -> dict | list:
    """lab/data/<name>.yaml, checked: when `list_key` is given every entry of that list needs a source."""
    path = DATA_DIR / f"{name}.yaml"
    if not path.exists():
        raise DataError(f"{path}: missing data file")
    # libyaml's parser when PyYAML has it (same safe constructor, same result; ~8x faster on these files)
    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    if list_key is not None:
        entries = data.get(list_key) if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise DataError(f"{path}: expected a list under '{list_key}'")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not entry.get("source"):
                ident = entry.get("id", i) if isinstance(entry, dict) else i
                raise DataError(f"{path}: entry {ident!r} has no 'source'")
    return data
