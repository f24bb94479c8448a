"""Parity with the real engine: llama-server's reported KV buffers equal lab.kvcache's prediction exactly."""
import pytest

from lab import kvcache_verify as kv
from lab import models, paths

pytestmark = pytest.mark.integration

SAMPLE_LOG = """\
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
llama_kv_cache:        CPU KV buffer size =    67.50 MiB
llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells
llama_kv_cache:        CPU KV buffer size =    12.00 MiB
llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), K (f16):    6.00 MiB, V (f16):    6.00 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells
llama_kv_cache:        CPU KV buffer size =    15.00 MiB
llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), K (q8_0):    7.50 MiB, V (q4_0):    7.50 MiB
"""


def test_parser_skips_dry_run_and_names_caches():
    caches = kv.parse_kv_lines(SAMPLE_LOG)
    assert [(c["cache"], c["cells"], c["size_mib"]) for c in caches] == [
        ("kv", 1024, "67.50"), ("global", 4096, "12.00"), ("swa", 1024, "15.00")]
    assert (caches[2]["type_k"], caches[2]["type_v"], caches[2]["streams"]) == ("q8_0", "q4_0", 1)


@pytest.fixture(scope="module")
def grid_rows(tmp_path_factory):
    try:
        server = paths.tool("llama-server")
        embedded = {k: paths.embedded_model(k) for k in ("smollm2", "gemma3-270m")}
    except paths.SetupMissing as exc:
        pytest.skip(str(exc))
    found = {k: (p, models.from_gguf(p)) for k, p in embedded.items()}
    return kv.run_grid(found, kv.default_grid(), tmp_path_factory.mktemp("kv_logs"), server)


@pytest.mark.parametrize("model", ["smollm2", "gemma3-270m"])
def test_llama_cpp_reports_exactly_the_prediction(grid_rows, model):
    rows = [r for r in grid_rows if r["model"] == model]
    assert len({(r["n_ctx"], r["n_parallel"], r["type_k"], r["kv_unified"]) for r in rows}) == 6
    bad = [r for r in rows if not r["match"]]
    assert not bad, bad
    assert all(r["error_pct"] == 0 for r in rows)
    if model == "gemma3-270m":  # the sliding-window model reports a global and an SWA cache per run
        assert {r["cache"] for r in rows} == {"global", "swa"}
