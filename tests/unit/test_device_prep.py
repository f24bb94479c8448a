"""lab.setup.device_prep: what the stripped llama.cpp source keeps (pure), and set-up's offline switches."""
import pytest

from lab.core import paths
from lab.setup import device_prep, llama_source, models, venv

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


def test_peer_wheels_are_the_cpu_lock_pins_and_do_not_repeat_the_device_wheels():
    # MODE=peers carries the clients for the H200 at the versions the CPU check ran (lab/data/peers.lock.txt)
    norm = lambda n: n.lower().replace("_", "-")  # noqa: E731
    lock = {norm(line.split("==")[0]): line.split("==")[1].split()[0]
            for line in (paths.DATA / "peers.lock.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    peers = {norm(w.split("==")[0]): w.split("==")[1] for w in device_prep.PEER_WHEELS}
    assert len(peers) == len(device_prep.PEER_WHEELS)
    assert {k: lock.get(k) for k in peers} == peers
    assert {"llama-benchy", "guidellm"} <= set(peers) and "asyncio" not in peers and "torch" not in peers
    assert not set(peers) & {norm(w.split("==")[0]) for w in device_prep.DEVICE_WHEELS}


def test_offline_switches(monkeypatch, tmp_path):
    monkeypatch.delenv("LAB_LLAMA_SRC", raising=False)
    monkeypatch.delenv("LAB_WHEELS", raising=False)
    assert llama_source.given_source() is None and venv.offline_wheels() is None
    assert llama_source.sdist_path(tmp_path).name == "llama_cpp_python-0.3.36.tar.gz"
    monkeypatch.setenv("LAB_LLAMA_SRC", str(tmp_path / "nope.tar.xz"))
    with pytest.raises(SystemExit, match="LAB_LLAMA_SRC.*no such file"):
        llama_source.given_source()
    (tmp_path / "whl").mkdir()
    monkeypatch.setenv("LAB_WHEELS", str(tmp_path / "whl"))
    with pytest.raises(SystemExit, match="not a folder of .whl files"):
        venv.offline_wheels()


def test_embedded_model_travels_in_parts_and_is_joined_once_complete(tmp_path):

    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    data = bytes(range(256)) * 40 + b"tail"  # 10,244 bytes → 3 parts of 4,096
    (cache / "models" / models.SMOLLM2_FILE).write_bytes(data)
    out = tmp_path / ".device-models"
    manifest = device_prep.split_models(out, cache, part_bytes=4096)
    assert [p["bytes"] for p in manifest["parts"]] == [4096, 4096, 2052]
    assert sorted(x.name for x in out.iterdir()) == ["0", "1", "2"] and (out / "0" / "MODELS.json").exists()
    there = tmp_path / "device-cache" / "models"
    store = tmp_path / "store"
    calls = [["0"], ["1"], ["2"]]  # one folder per device call, as the carry limit forces
    said = []
    for names in calls:
        call = tmp_path / f"call-{names[0]}"
        for n in names:
            import shutil

            shutil.copytree(out / n, call / n)
        said.append(device_prep.assemble(call, store, there))
    assert said[0] == "1 of 3 parts here" and said[1] == "2 of 3 parts here" and "written (10,244 bytes" in said[2]
    assert (there / models.SMOLLM2_FILE).read_bytes() == data
    assert "already there" in device_prep.assemble(tmp_path / "call-2", store, there)
