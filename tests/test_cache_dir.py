"""One cache folder: lab.setup.cache_dir() is the only reader of LAB_CACHE, and everything the lab keeps in its
cache (the model-file hash cache, the synthetic models, the vocabularies, the disk check's default) sits under it."""
import re
from pathlib import Path

from lab import setup
from lab.records import manifest

LAB = Path(__file__).resolve().parent.parent / "lab"


def test_lab_cache_is_read_in_one_place():
    readers = sorted(str(p.relative_to(LAB)) for p in LAB.rglob("*.py")
                     if re.search(r"""environ[^\n]*["']LAB_CACHE["']""", p.read_text()))
    assert readers == ["setup/__init__.py"], f"LAB_CACHE resolved outside lab.setup.cache_dir: {readers}"


def test_cache_paths_follow_lab_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_CACHE", "~/somewhere-else")
    assert setup.cache_dir() == Path.home() / "somewhere-else"
    assert manifest._hash_cache_file() == setup.cache_dir() / "sha256-cache.json"  # was not ~-expanded
    monkeypatch.setenv("LAB_CACHE", str(tmp_path))
    assert manifest._hash_cache_file() == tmp_path / "sha256-cache.json"
