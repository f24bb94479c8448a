"""One cache folder: lab.core.paths.cache_dir() is the only reader of LAB_CACHE, and everything the lab keeps in its
cache (the model-file hash cache, the synthetic models, the vocabularies, the disk check's default) sits under it."""
import re
from pathlib import Path

import pytest

from lab import setup
from lab.core import paths
from lab.records import manifest

LAB = Path(__file__).resolve().parents[2] / "lab"


def test_lab_cache_is_read_in_one_place():
    readers = sorted(str(p.relative_to(LAB)) for p in LAB.rglob("*.py")
                     if re.search(r"""environ[^\n]*["']LAB_CACHE["']""", p.read_text()))
    assert readers == ["core/paths.py"], f"LAB_CACHE resolved outside lab.core.paths.cache_dir: {readers}"


def test_cache_paths_follow_lab_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_CACHE", "~/somewhere-else")
    assert paths.cache_dir() == Path.home() / "somewhere-else"
    assert manifest._hash_cache_file() == paths.cache_dir() / "sha256-cache.json"  # was not ~-expanded
    monkeypatch.setenv("LAB_CACHE", str(tmp_path))
    assert manifest._hash_cache_file() == tmp_path / "sha256-cache.json"


def test_a_cache_path_that_is_a_file_is_one_line_naming_the_variable(monkeypatch, tmp_path, capsys):
    afile = tmp_path / "not-a-folder"
    afile.write_text("x")
    for value, says in ((afile, "is a file"), (afile / "sub", f"lies under {afile}, which is a file")):
        monkeypatch.setenv("LAB_CACHE", str(value))
        with pytest.raises(NotADirectoryError, match=re.escape(f"LAB_CACHE={value}: {says}, not a folder")):
            paths.cache_dir()
        # `python3 -m lab.setup`: one line and exit 1 before any work, not a traceback from a mkdir
        with pytest.raises(SystemExit) as stop:
            setup.main(setup.arg_parser().parse_args([]))
        assert str(stop.value) == f"[setup] LAB_CACHE={value}: {says}, not a folder; point LAB_CACHE at a folder " \
                                  "(it is made if missing), or unset LAB_CACHE for ~/.cache/llm-lab"
    with pytest.raises(SystemExit, match=re.escape(f"--cache={afile}: is a file")):
        setup.main(setup.arg_parser().parse_args(["--cache", str(afile)]))
