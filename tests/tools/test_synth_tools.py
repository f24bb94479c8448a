"""The tools tier of tests/unit/test_synth.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import re

import pytest
from conftest import setup_missing

from lab.core import paths
from lab.model import gguf_file, llama_bench, models, synth, synth_metadata
from shared_synth import QWEN35_MTP, TINY, vocab, vocab_qwen35


# ---------------------------------------------------------------- the vocabulary
@pytest.mark.tools
def test_vocab_parser_matches_gguf_reader(vocab):
    from gguf import GGUFReader

    ours = {kv.key: kv for kv in synth_metadata.vocab_kvs(vocab)}
    reader = GGUFReader(str(vocab))
    theirs = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    assert set(ours) == set(theirs)
    for key, field in theirs.items():
        assert ours[key].vtype == field.types[0]
        assert ours[key].value == field.contents(), key
    # the same reader (lab.model.gguf_file) answers the lab's other GGUF questions: lengths agree
    header = gguf_file.read_gguf_header(vocab)
    assert header.array_lengths["tokenizer.ggml.tokens"] == len(ours["tokenizer.ggml.tokens"].value)
    assert [k for k in header.keys if k.startswith("tokenizer.")] == list(ours)


# ---------------------------------------------------------------- integration: the real llama.cpp
@pytest.fixture(scope="module")
def tiny_file(vocab, tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "tiny-Q4_K.gguf"
    _, kvs, plan, size = synth.plan_file(TINY, "Q4_K", vocab)
    synth.write_file(path, TINY, kvs, plan, size, progress=False)
    return path, size


@pytest.mark.tools
def test_tiny_file_size_and_header_are_as_predicted(tiny_file):
    path, size = tiny_file
    assert path.stat().st_size == size["total_bytes"]
    header = gguf_file.read_gguf_header(path)
    assert header.tensor_bytes == size["tensor_bytes"] and header.n_params == size["params"]
    assert header.metadata["lab.synthetic"] is True and "garbage" in header.metadata["lab.synthetic.note"]
    arch = models.from_gguf(path)
    assert (arch.n_layers, arch.n_heads, arch.n_kv_heads, arch.head_dim_k, arch.hidden_size, arch.ffn_size,
            arch.vocab_size) == (2, 4, 2, 64, 256, 768, 151936)


@pytest.mark.tools
def test_llama_bench_runs_the_tiny_file(tiny_file):
    try:
        paths.tool("llama-bench")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
    path, size = tiny_file
    result = llama_bench.run(path, threads=2, n_prompt=32, n_gen=8, reps=1, timeout_s=300)
    rows = result["rows"]
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(32, 0), (0, 8)]
    assert all(t["tok_s"] > 0 for t in result["tests"]) and [t["test"] for t in result["tests"]] == ["pp32", "tg8"]
    assert rows[0]["model_size"] == size["tensor_bytes"] and rows[0]["model_n_params"] == size["params"]


@pytest.mark.tools
def test_llama_cpp_generates_tokens_from_the_tiny_file(tiny_file):
    llama_cpp = pytest.importorskip("llama_cpp")
    path, _ = tiny_file
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=2, verbose=False)
    out = llm.create_completion("Hello, world", max_tokens=8, temperature=0)
    assert out["usage"]["completion_tokens"] == 8 and out["usage"]["prompt_tokens"] >= 3
    assert llm.metadata["lab.synthetic"] == "true"


# ---------------------------------------------------------------- integration: a 4-layer Qwen3.8-27B served by llama-server
@pytest.fixture(scope="module")
def qwen38_4_layers(vocab_qwen35, tmp_path_factory):
    """Qwen3.8-27B's real per-layer shape, 4 layers (3 Gated DeltaNet + 1 full attention) + its MTP block (blk.4),
    real vocab size: a 2.5 GB file, ~10-40 s to write here."""
    path = tmp_path_factory.mktemp("synth35") / "qwen3.8-27b-4L-Q4_K.gguf"
    arch, kvs, plan, size = synth.plan_file("qwen3.8-27b", "Q4_K", vocab_qwen35, layers=4)
    synth.write_file(path, arch, kvs, plan, size, progress=False)
    return path, size


@pytest.mark.tools
def test_qwen38_file_reads_back_as_the_hybrid(qwen38_4_layers):
    path, size = qwen38_4_layers
    assert path.stat().st_size == size["total_bytes"]
    header = gguf_file.read_gguf_header(path)
    assert header.tensor_bytes == size["tensor_bytes"] and header.n_params == size["params"]
    assert header.metadata["qwen35.block_count"] == 5 and header.metadata["qwen35.nextn_predict_layers"] == 1
    assert header.mtp_tensor_bytes == size["mtp_bytes"] == 238_983_168
    assert gguf_file.gguf_weights_bytes(path) == size["tensor_bytes"] - size["mtp_bytes"]  # what llama.cpp loads
    arch = models.from_gguf(path)
    full = models.stand_in("qwen3.8-27b")
    assert (arch.family, arch.n_layers, arch.mtp_layers, arch.global_layers, arch.linear_layers) == \
        ("qwen35", 4, 1, (3,), (0, 1, 2))
    assert arch.linear_state_bytes_per_layer == full.linear_state_bytes_per_layer == 3_268_608
    assert (arch.n_heads, arch.n_kv_heads, arch.head_dim_k, arch.vocab_size) == (24, 4, 256, 248_320)


@pytest.mark.tools
def test_llama_server_serves_the_qwen35_file(qwen38_4_layers, tmp_path):
    """The real llama-server (CPU build) loads the hybrid and answers a completion; its log shows both the
    attention KV cache (1 layer) and the recurrent state (3 layers). Without --spec-type draft-mtp it skips
    exactly the MTP block's tensors, by name and size (src/llama-model-loader.cpp "model has unused tensor")."""
    import httpx

    from lab.serving import serve
    from lab.serving.engines import Command

    try:
        server_bin = paths.tool("llama-server")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
    path, size = qwen38_4_layers
    port = serve.free_port()
    cmd = Command(engine="llama.cpp", argv=(str(server_bin), "-m", str(path), "--host", "127.0.0.1", "--port",
                                            str(port), "-c", "2048", "-np", "1", "-t", "2", "--no-warmup", "-lv", "4"),
                  host="127.0.0.1", port=port, health_path="/health", served_model=None, notes=())
    with serve.start(cmd, log_dir=tmp_path, name="qwen35", health_timeout_s=180) as srv:
        reply = httpx.post(srv.base_url + "/completion", json={"prompt": "Hello, world", "n_predict": 8,
                                                               "temperature": 0},
                           headers=srv.headers(), timeout=120).json()  # the lab's servers take a per-run key
        log = srv.log_text()
    assert reply["tokens_predicted"] == 8 and isinstance(reply["content"], str)
    assert "llama_kv_cache: size =" in log and "llama_memory_recurrent: size =" in log
    unused = dict(re.findall(r"model has unused tensor (\S+) \(size = (\d+) bytes\)", log))
    assert set(unused) == {f"blk.4.{n}" for n in QWEN35_MTP}
    assert sum(int(b) for b in unused.values()) == size["mtp_bytes"]
    assert re.search(r"n_layer\s+= 4\b", log) and re.search(r"n_layer_all\s+= 5\b", log)
