"""Free disk, one answer for every writer of big files (the F16 reference and the quant ladder, perplexity logits,
synthetic GGUFs) and for notebook 01's disk check: refuse before a write that cannot finish, because an 18 GB file
on a full disk fails after minutes and leaves a partial file behind."""
import shutil
from pathlib import Path

from lab.core.units import GIB

FIX = "Free some space, or point LAB_CACHE at a larger disk and re-run set-up."


class DiskSpaceError(OSError):
    """Not enough free disk; the message names the folder, what needs the space, the bytes needed and free.
    An OSError, as the write's own ENOSPC would be, so the CLI reports it in one line."""


def usage_at(folder: str | Path) -> tuple[Path, tuple]:
    """(the nearest folder that exists, its file system's usage): a folder about to be made has no usage yet."""
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe)


def free_bytes(folder: str | Path) -> int:
    return usage_at(folder)[1].free


def check_free_disk(folder: str | Path, needed: int, what: str, fix: str = FIX,
                    replacing: str | Path | None = None) -> int:
    """Raise DiskSpaceError unless `folder`'s file system has `needed` bytes free; return the free bytes.
    `replacing`: a file the write will replace, whose bytes count as free."""
    free = free_bytes(folder)
    if replacing is not None and Path(replacing).is_file():
        free += Path(replacing).stat().st_size
    if free < needed:
        raise DiskSpaceError(f"{folder}: {what} needs {needed:,} bytes ({needed / GIB:.2f} GiB) free, only "
                             f"{free:,} bytes ({free / GIB:.2f} GiB) are. {fix}")
    return free
