"""Tests by tier as folders (TIERS in tests/conftest.py): every test carries the marker of the folder its file sits
in and no other tier's, every test file sits in a tier's folder, and no two share a name (pytest imports test files
by their name). .ci/tier_tests.py puts a file that does not in its place."""
from collections import Counter

from conftest import SLOW, TESTS, TIERS, folder_tier


def test_every_test_carries_the_marker_of_its_folder(request):
    wrong = {item.nodeid: sorted({m.name for m in item.iter_markers()} & set(TIERS))
             for item in request.session.items
             if {m.name for m in item.iter_markers()} & set(TIERS) != {folder_tier(item)}}
    assert not wrong, f"tier markers that are not their folder's (move them: .ci/tier_tests.py): {wrong}"


def test_every_test_file_sits_in_one_tiers_folder_under_its_own_name():
    files = sorted(TESTS.rglob("test_*.py"))
    astray = [str(p.relative_to(TESTS)) for p in files if p.parent.parent != TESTS or p.parent.name not in TIERS]
    assert not astray, f"test files outside tests/unit, tests/tools, tests/notebooks: {astray}"
    assert {p.parent.name for p in files} == set(TIERS)
    twice = [name for name, n in Counter(p.name for p in files).items() if n > 1]
    assert not twice, f"test files of one name in two tiers (pytest imports them by name): {twice}"


def test_every_slow_file_exists():
    """conftest.SLOW names files: a name that matches none would quietly put its tests back into `make test-quick`."""
    assert set(SLOW) <= {p.name for p in TESTS.rglob("test_*.py")}, set(SLOW) - {p.name for p in TESTS.rglob("test_*.py")}
