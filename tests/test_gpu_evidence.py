"""lab.measure.gpu_evidence (run on a GPU box by lab/device/gpu_evidence.sh) on this CPU with tiny inputs: a 2-layer
random-weight file of a tiny Qwen3 shape, llama-bench for a few tokens, and the llama-server sweep at 1 and 2
streams through the script's own entry point. What is checked is the path — records written with the numbers
in them, the file's size as predicted, nothing left running — not the speeds, which are a shared CPU's."""
import json
from dataclasses import replace

import pytest

from lab.core import paths
from lab.measure import gpu_evidence
from lab.model import models, synth, synth_metadata

pytestmark = pytest.mark.tools
TINY = replace(models.stand_in("qwen3-14b"), name="tiny-qwen3", n_layers=2, hidden_size=256, ffn_size=512,
               n_heads=4, n_kv_heads=2, head_dim_k=64, head_dim_v=64)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smol_model):
    """(model, vocab, llama.cpp bin folder): the tiny file written by lab.synth with llama.cpp's qwen2 vocabulary."""
    vocab = synth_metadata.default_vocab_path()
    out = tmp_path_factory.mktemp("gpu-evidence") / "tiny.gguf"
    arch, kvs, plan, size = synth.plan_file(TINY, "Q4_K", vocab)
    synth.write_file(out, arch, kvs, plan, size, 0, progress=False)
    return out, vocab, paths.tool("llama-bench").parent


def test_synth_record_says_the_file_is_the_predicted_size(tiny):
    model, vocab, _ = tiny
    rec = gpu_evidence.synth_record(model, TINY, vocab, synth_seconds=1.0)
    s = rec["summary"]
    assert s["size_matches"] and s["bytes_written"] == s["bytes_predicted"] == model.stat().st_size
    meta = rec["metadata"]  # the header read back, tokenizer left out
    assert meta["lab.synthetic"] is True and meta["lab.synthetic.shape_of"] == "tiny-qwen3"
    assert meta["llama.block_count"] == 2 and meta["llama.embedding_length"] == 256 and rec["vocab_file"] == vocab.name


def test_llama_bench_rows_from_the_real_tool(tiny):
    model, _, _ = tiny
    run = gpu_evidence.bench_run(model, n_prompt=16, n_gen=8, reps=2, flash_attn="0,1")
    assert "error" not in run, run.get("error")
    rows = gpu_evidence.bench_rows([run])
    assert sorted((r["test"], bool(r["flash_attn"])) for r in rows) == [
        ("pp16", False), ("pp16", True), ("tg8", False), ("tg8", True)]
    assert all(r["tok_s"] > 0 and r["reps"] == 2 and len(r["samples_tok_s"]) == 2 for r in rows)


def test_the_script_s_server_sweep_on_cpu(tiny, tmp_path, monkeypatch):
    model, vocab, bin_dir = tiny
    monkeypatch.setenv("LAB_LLAMA_BIN", str(bin_dir))  # main() sets it for the process: put it back afterwards
    out = tmp_path / "evidence"
    rc = gpu_evidence.main(["--profile", "cpu-default", "--model", str(model), "--vocab", str(vocab),
                            "--llama-bin", str(bin_dir), "--out", str(out), "--skip", "hardware,synth,bench",
                            "--levels", "1,2", "--output-tokens", "8", "--prompt-tokens", "32"])
    failures = out / "logs" / "failures.txt"
    assert rc == 0, failures.read_text() if failures.exists() else "no failures.txt"
    rec = json.loads((out / "records" / "06_server_concurrency.json").read_text())
    by_level = rec["summary"]["total_tok_s_by_concurrency"]
    assert set(by_level) == {"1", "2"} and all(v > 0 for v in by_level.values())
    assert [s["successes"] for s in rec["summaries"]] == [4, 4]  # LEVEL_REQUESTS: 4 at 1 and at 2 streams
    assert rec["server_stop"]["left_running"] == [] and rec["lab_checkout"]["sha"]
    assert "-fa" in rec["summary"]["command"] and rec["summary"]["command"][rec["summary"]["command"].index("-fa") + 1] == "on"
