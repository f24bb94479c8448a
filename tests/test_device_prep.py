"""lab.setup.device_prep: what the stripped llama.cpp source keeps (pure), and set-up's offline switches."""
import pytest

from lab import setup
from lab.setup import device_prep

TOP = "llama_cpp_python-0.3.36/"
V = TOP + "vendor/llama.cpp/"


@pytest.mark.parametrize("member,kept", [
    (TOP + "llama_cpp/llama.py", True), (TOP + "tests/test_llama.py", False), (TOP + ".git/HEAD", False),
    (V + "CMakeLists.txt", True), (V + "src/llama.cpp", True), (V + "ggml/src/ggml-cuda/mmq.cu", True),
    (V + "ggml/src/ggml-cpu/ggml-cpu.c", True), (V + "ggml/src/ggml-vulkan/ggml-vulkan.cpp", False),
    (V + "ggml/src/ggml.c", True), (V + "models/ggml-vocab-qwen2.gguf", True), (V + "models/ggml-vocab-qwen35.gguf", True),
    (V + "models/ggml-vocab-llama-bpe.gguf", False), (V + "docs/build.md", False), (V + "examples/x.cpp", False),
    (V + "scripts/ui-assets.cmake", True), (V + "tools/server/server.cpp", True), (V + "tools/ui/tests/a.ts", False),
    (V + "gguf-py/gguf/gguf.py", False), (V + ".git/config", False),
])
def test_keep(member, kept):
    assert device_prep.keep(member) is kept


def test_wheels_pinned_once():
    names = [w.split("==")[0].lower() for w in device_prep.DEVICE_WHEELS]
    assert len(names) == len(set(names)) and all("==" in w for w in device_prep.DEVICE_WHEELS)
    assert {"papermill", "ipykernel", "plotly", "pydantic", "gguf", "nbformat", "jupyter_client", "mistune"} <= set(names)


def test_offline_switches(monkeypatch, tmp_path):
    monkeypatch.delenv("LAB_LLAMA_SRC", raising=False)
    monkeypatch.delenv("LAB_WHEELS", raising=False)
    assert setup.given_source() is None and setup.offline_wheels() is None
    assert setup.sdist_path(tmp_path).name == "llama_cpp_python-0.3.36.tar.gz"
    monkeypatch.setenv("LAB_LLAMA_SRC", str(tmp_path / "nope.tar.xz"))
    with pytest.raises(SystemExit, match="LAB_LLAMA_SRC.*no such file"):
        setup.given_source()
    (tmp_path / "whl").mkdir()
    monkeypatch.setenv("LAB_WHEELS", str(tmp_path / "whl"))
    with pytest.raises(SystemExit, match="not a folder of .whl files"):
        setup.offline_wheels()
