"""lab.core.disk: the one free-disk check of every writer of big files (quant ladder, F16 reference, perplexity
logits, synthetic GGUFs) and of notebook 01's inventory."""
import pytest

from lab.core import disk
from lab.measure import metrics


def test_a_file_being_replaced_counts_as_free(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    # a fixed free figure: the real one moves while other tests write
    monkeypatch.setattr(shutil, "disk_usage", lambda p: namedtuple("usage", "total used free")(10**9, 10**9 - 10**6, 10**6))
    old = tmp_path / "model.gguf"
    old.write_bytes(b"\0" * 4096)
    with pytest.raises(disk.DiskSpaceError, match=r"model.gguf needs 1,002,048 bytes .* free, only 1,000,000 bytes"):
        disk.check_free_disk(tmp_path, 10**6 + 2048, "model.gguf")
    assert disk.check_free_disk(tmp_path, 10**6 + 2048, "model.gguf", replacing=old) == 10**6 + 4096


def test_a_folder_not_made_yet_is_judged_by_its_nearest_parent(tmp_path):
    where, usage = disk.usage_at(tmp_path / "quant" / "deeper")
    assert where == tmp_path and usage.total > usage.free > 0


def test_the_error_is_an_oserror_so_the_cli_reports_it_in_one_line(tmp_path):
    with pytest.raises(OSError, match="Free some space"):
        disk.check_free_disk(tmp_path, 10**18, "the F16 reference")


def test_ratio_never_turns_a_missing_number_into_zero():
    assert metrics.ratio(None, 3.0) is None and metrics.ratio(3.0, 0) is None and metrics.ratio(3.0, None) is None
    assert metrics.ratio(1.0, 3.0, 3) == 0.333 and metrics.ratio(1.0, 4.0) == 0.25
    assert metrics.served_ratio(81.5, 87.6) == metrics.ratio(81.5, 87.6)
