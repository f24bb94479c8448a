"""environment.yml (conda) and pyproject.toml (pip/uv) must pin the same packages at the same versions."""
import tomllib

import yaml

from conftest import ROOT


def _pins(items):
    return {i.split("==")[0].lower(): i.split("==")[1] for i in items if "==" in i}


def test_conda_pins_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _pins(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_list = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    have = _pins(pip_list)
    assert have == wanted


def test_setup_builds_the_pinned_llama_cpp_python():
    from lab.core import paths

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = _pins(project["dependencies"])["llama-cpp-python[server]"]
    assert paths.LLAMA_CPP_PYTHON_VERSION == pin
