"""`lab cache`: sizes per area, the entries this checkout no longer uses (and only those) removed by --prune."""
import json
import os
import time

from lab.core import paths
from lab.measure import kvcache_verify
from lab.model import synth, synth_shapes
from lab.diagnose import cache

V = paths.LLAMA_CPP_PYTHON_VERSION


def fake_cache(root):
    files = {f"llama.cpp/{V}-cpu-aaaa/bin/llama-server": 3000, f"llama.cpp/{V}-cuda70-bbbb/bin/llama-server": 5000,
             "llama.cpp/0.3.9-cpu-cccc/bin/llama-server": 7000, f"wheels/{V}-cpu-aaaa/x.whl": 100,
             "wheels/0.3.9-cpu-cccc/x.whl": 200, f"sdist/llama_cpp_python-{V}.tar.gz": 300,
             "sdist/llama_cpp_python-0.3.9.tar.gz": 400, f"vocab/{V}/v.gguf": 10, "vocab/0.3.9/v.gguf": 20,
             "synth/wanted.gguf": 9000, "synth/old-shape.gguf": 8000, "synth/old.gguf.partial": 600,
             "synth/writing-now.gguf.partial": 500, f"quant/mine-0123456789abcdef/{V}-cpu-aaaa/Q4_K_M.gguf": 4000,
             "quant/mine-0123456789abcdef/0.3.9-cpu-cccc/Q4_K_M.gguf": 4000,
             "quant/mine-0123456789abcdef/reference-F16.gguf": 8000,
             "uv/archive/pkg": 50, "logs/build.log": 5}
    for rel, n in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * n)
    hour_ago = time.time() - 2 * cache.PARTIAL_AGE_S
    os.utime(root / "synth/old.gguf.partial", (hour_ago, hour_ago))


UNUSED = {"llama.cpp/0.3.9-cpu-cccc", "wheels/0.3.9-cpu-cccc", "sdist/llama_cpp_python-0.3.9.tar.gz",
          "vocab/0.3.9", "synth/old-shape.gguf", "synth/old.gguf.partial", "quant/mine-0123456789abcdef/0.3.9-cpu-cccc"}


def test_only_entries_of_another_version_or_unused_shape_are_called_unused(tmp_path, monkeypatch):
    fake_cache(tmp_path)
    monkeypatch.setattr(cache, "synth_in_use", lambda: {"wanted.gguf": ["notebook 05's KV parity grid"]})
    found = cache.survey(tmp_path)
    assert {f"{e['area']}/{e['name']}" for e in found["entries"] if e["unused"]} == UNUSED
    assert next(e for e in found["entries"] if e["name"] == "wanted.gguf")["used_by"] == ["notebook 05's KV parity grid"]
    areas = {a["area"]: a for a in found["areas"]}
    assert areas["synth"]["entries"] == 4 and areas["quant"]["holds"].startswith("notebook 03")
    assert areas["quant"]["entries"] == 3  # judged per source model's build-key folder
    assert found["bytes"] == sum(a["bytes"] for a in areas.values()) > 50_000  # whole blocks, at least the bytes


def test_prune_removes_those_and_nothing_else(tmp_path, monkeypatch, capsys):
    fake_cache(tmp_path)
    monkeypatch.setattr(cache, "synth_in_use", lambda: {"wanted.gguf": ["notebook 05's KV parity grid"]})
    entries = {f"{e['area']}/{e['name']}" for e in cache.survey(tmp_path)["entries"]}
    assert cache.main(["--cache", str(tmp_path), "--prune"]) == 0
    assert {e for e in entries if not (tmp_path / e).exists()} == UNUSED
    out = capsys.readouterr()
    assert "No longer used" in out.out and "pruned:" in out.err
    assert cache.main(["--cache", str(tmp_path)]) == 0
    assert "Nothing here is unused" in capsys.readouterr().out


def test_without_set_up_no_synthetic_file_is_judged(tmp_path, monkeypatch, capsys):
    fake_cache(tmp_path)

    def no_vocab():
        raise synth_shapes.SynthError("no vocabulary GGUF: run `make setup`")

    monkeypatch.setattr(cache, "synth_in_use", no_vocab)
    assert cache.main(["--cache", str(tmp_path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert not [e for e in found["entries"] if e["area"] == "synth" and e["name"].endswith(".gguf") and e["unused"]]
    assert "make setup" in found["synth_note"]


def test_hard_links_are_counted_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 8192)
    os.link(tmp_path / "a", tmp_path / "b")
    assert cache.tree_bytes(tmp_path) < 2 * 8192


def test_the_synthetic_files_in_use_are_the_ones_the_lab_writes():
    wanted = cache.synth_in_use()
    grid = synth.cached_path(**kvcache_verify.HYBRID_SYNTH)[0].name
    assert grid == "qwen3.8-27b-4L-mtp1-Q4_K-seed0.gguf" and "notebook 05's KV parity grid" in wanted[grid]
    assert wanted["qwen3.8-27b-64L-mtp1-Q4_K-seed0.gguf"] == ["profile h100-x1", "profile h200-x1", "profile h200-x2"]
    assert "profile h200-x1's draft" in wanted[grid]  # spec_draft synth:4 is the same file


def test_the_cli_verb_lists_the_cache_named_by_lab_cache(tmp_path, monkeypatch):
    from conftest import cli_output

    fake_cache(tmp_path)
    monkeypatch.setattr(cache, "synth_in_use", lambda: {"wanted.gguf": ["notebook 05's KV parity grid"]})
    monkeypatch.setenv("LAB_CACHE", str(tmp_path))
    code, out = cli_output(["cache"])
    assert code == 0 and f"lab cache: {tmp_path}" in out and "llama.cpp/0.3.9-cpu-cccc" in out
    assert (tmp_path / "llama.cpp/0.3.9-cpu-cccc").exists()  # listing removes nothing
