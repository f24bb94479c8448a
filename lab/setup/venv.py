"""Set-up's first step: the lab's venv (.venv), made from the running (system) interpreter; on an offline machine
(LAB_WHEELS) without pip, seeing that interpreter's own packages. Standard library only."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from lab.core.paths import VENV
from lab.setup.steps import sh, step


def venv_python() -> Path:
    return VENV / "bin" / "python"


def offline_wheels() -> Path | None:
    """LAB_WHEELS: the folder of wheels an offline machine installs from, else None (install from PyPI)."""
    value = os.environ.get("LAB_WHEELS")
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir() or not list(path.glob("*.whl")):
        sys.exit(f"[setup] LAB_WHEELS={value}: not a folder of .whl files (make it with `python3 -m lab.setup.device_prep`)")
    return path


@step("python venv (.venv)")
def make_venv() -> str | None:
    if venv_python().exists():
        return "cached, skipped"
    if offline_wheels():
        # No pip inside (ensurepip may be missing and nothing can be downloaded): packages go in with the
        # running interpreter's pip (--target); that interpreter's own packages (torch, pandas, numpy on a
        # GPU image) stay visible through a .pth file, after the venv's own.
        sh([sys.executable, "-m", "venv", "--without-pip", str(VENV)])
        hosts = [p for p in host_site_dirs() if Path(p).is_dir()]
        (venv_site() / "_lab_host_site.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in hosts) + "\n")
        return f"made offline (no pip; sees {', '.join(hosts) or 'no other site-packages'})"
    sh([sys.executable, "-m", "venv", str(VENV)])
    return None


def host_site_dirs() -> list[str]:
    """The running interpreter's site-packages folders (a venv's own when set-up runs inside one)."""
    import site

    return list(dict.fromkeys(site.getsitepackages()))


def venv_site() -> Path:
    """.venv's site-packages (lib/pythonX.Y/site-packages; the venv runs this same Python version)."""
    return VENV / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
