"""The tools tier of tests/unit/test_models.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest
from conftest import setup_missing

from lab.model import gguf_file, models


def _embedded(key):
    from lab.core import paths

    try:
        return paths.embedded_model(key)
    except paths.SetupMissing as exc:
        setup_missing(str(exc))


@pytest.mark.tools
def test_gguf_header_reader_agrees_with_gguf_package():
    from gguf import GGUFReader

    path = _embedded("smollm2")
    ours = gguf_file.read_gguf_header(path)
    ref = GGUFReader(path)
    for key in ("general.architecture", "llama.block_count", "llama.attention.head_count_kv",
                "llama.context_length", "llama.embedding_length"):
        assert ours.metadata[key] == ref.fields[key].contents()
    assert ours.n_params == sum(int(t.n_elements) for t in ref.tensors)
    assert ours.tensor_bytes == sum(int(t.n_bytes) for t in ref.tensors)
    assert ours.array_lengths["tokenizer.ggml.tokens"] == len(ref.fields["tokenizer.ggml.tokens"].data)


@pytest.mark.tools
def test_embedded_models_architecture():
    smol = models.from_gguf(_embedded("smollm2"))
    assert (smol.n_layers, smol.n_heads, smol.n_kv_heads, smol.head_dim_k, smol.hidden_size) == (30, 9, 3, 64, 576)
    gemma = models.from_gguf(_embedded("gemma3-270m"))
    assert (gemma.n_layers, gemma.n_kv_heads, gemma.head_dim_k, gemma.sliding_window) == (18, 1, 256, 512)
    assert gemma.global_layers == (5, 11, 17)
