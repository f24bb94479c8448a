"""Jupyter inside .venv: the lab's kernel (the one name notebooks' metadata carries) and nbconvert's offline HTML
template. Standard library only."""
from __future__ import annotations

import json

from lab.core.paths import ROOT, VENV
from lab.setup.steps import sh, step
from lab.setup.venv import venv_python

KERNEL_NAME = "llm-lab"
KERNEL_DISPLAY_NAME = "LLM lab (.venv)"  # the one name notebooks' metadata carries too


@step(f"Jupyter kernel '{KERNEL_NAME}' inside .venv")
def register_kernel() -> str | None:
    spec = VENV / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json"
    if spec.exists():
        return "cached, skipped"
    sh([str(venv_python()), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME,
        "--display-name", KERNEL_DISPLAY_NAME])
    return None


@step("nbconvert HTML export without CDN scripts (lab/nbconvert/lab-offline)")
def nbconvert_offline() -> str | None:
    """`jupyter nbconvert --to html` inside .venv uses the lab's offline template: the stock one loads
    MathJax, Mermaid and require.js from CDNs, so an exported notebook would not open offline."""
    config = VENV / "etc" / "jupyter" / "jupyter_nbconvert_config.json"
    want = {"TemplateExporter": {"extra_template_basedirs": [str(ROOT / "lab" / "nbconvert")]},
            "HTMLExporter": {"template_name": "lab-offline"}}
    if config.exists() and json.loads(config.read_text()) == want:
        return "cached, skipped"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(want, indent=2))
    return None
