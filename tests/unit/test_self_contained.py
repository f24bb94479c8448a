"""Evidence a user's clone can check: nothing the lab tells a user points outside the repository.

Sources in lab/data, check sources in lab/**/*.py, the notebooks and the profiles cite public references (URLs,
papers, release notes, repository paths) or the lab's own committed evidence (outputs/h200-x1/) — never the
project's working notes (shared/FACTS.md, shared/seeds/…, FIELD.md) or its internal issue numbers.
"""
import re
from pathlib import Path

import pytest

from conftest import ROOT
OUTSIDE = re.compile(r"shared/|FACTS\.md|FIELD\.md|ARCHITECTURE\.md|\bissues? \d+\b(?! *[)\]]? *\(?#)", re.IGNORECASE)
PENDING: set[str] = set()  # files another change is still rewriting (none now)
FILES = sorted(p for pattern in ("lab/**/*.py", "lab/data/*.yaml", "lab/data/*.txt", "notebooks/*.ipynb", "params/*.yaml",
                                 "README.md", "outputs/README.md")
               for p in ROOT.glob(pattern))


def _hits(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}" for n, line in
            enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1) if OUTSIDE.search(line)]


@pytest.mark.parametrize("path", [p for p in FILES if str(p.relative_to(ROOT)) not in PENDING],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(path):
    assert not _hits(path), "\n".join(_hits(path))


def test_the_pattern_catches_what_it_must_and_spares_public_issue_numbers():
    for bad in ("source: shared/FACTS.md 'vLLM'", "seen here, issue 6", "(issue 4)", "FIELD.md: x"):
        assert OUTSIDE.search(bad), bad
    for ok in ("vllm-project/vllm issue #39583", "https://github.com/ggml-org/llama.cpp/issues/6787",
               "llama.cpp PR #7809"):
        assert not OUTSIDE.search(ok), ok


def test_notebooks_exported_to_html_load_nothing_from_the_network():
    """Set-up makes lab/nbconvert/lab-offline nbconvert's HTML template (no MathJax/Mermaid/require.js CDN)."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    from lab.setup import jupyter

    cfg = Config({"TemplateExporter": {"extra_template_basedirs": [str(ROOT / "lab" / "nbconvert")]},
                  "HTMLExporter": {"template_name": "lab-offline"}})
    body, _ = HTMLExporter(config=cfg).from_filename(str(ROOT / "notebooks" / "01_hardware_checks.ipynb"))
    assert "01 · Hardware checks" in body
    assert not re.search(r"<script[^>]+src=[\"']https?://", body), "a CDN script in the exported notebook"
    assert "mathjax" not in body.lower().replace("mathjaxconfig", "")
    assert callable(jupyter.nbconvert_offline)
