"""The tools tier of tests/unit/test_quantize.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest

from lab.model import quant_formats, quant_ladder
from shared_quantize import ladder


@pytest.mark.tools
def test_f16_reference_keeps_every_metadata_key(ladder):
    import gguf
    import numpy as np
    from gguf import GGUFReader

    ref = ladder.reference
    src, out = GGUFReader(ref.source), GGUFReader(ref.path)
    assert set(src.fields) == set(out.fields)
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key == "general.file_type":
            continue
        assert out.fields[key].contents() == field.contents(), key
    assert out.fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_F16)
    assert [(t.name, list(t.shape)) for t in src.tensors] == [(t.name, list(t.shape)) for t in out.tensors]
    s, o = src.tensors[2], out.tensors[2]        # a Q4_1 matrix: the reference holds its exact values in F16
    assert s.tensor_type.name == "Q4_1" and o.tensor_type.name == "F16"
    want = gguf.quants.dequantize(s.data, s.tensor_type).astype(np.float16)
    assert np.array_equal(np.asarray(o.data).reshape(want.shape), want)


@pytest.mark.tools
def test_ladder_files_load_and_are_ordered_by_size(ladder):
    import llama_cpp

    assert [f.qtype for f in ladder.files] == list(quant_ladder.DEFAULT_LADDER)
    sizes = [f.bytes for f in ladder.files]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert ladder.reference.bytes > sizes[0]
    for f in ladder.files:
        assert quant_formats.gguf_info(f.path).tensor_bytes == f.tensor_bytes
        llm = llama_cpp.Llama(model_path=str(f.path), vocab_only=True, verbose=False)
        assert llm.n_vocab() == 49152
        del llm
    small = llama_cpp.Llama(model_path=str(ladder.files[-1].path), n_ctx=32, n_threads=2, verbose=False)
    small.eval(small.tokenize(b"Hello"))     # one real forward pass on the smallest file
    assert small.n_tokens > 0


@pytest.mark.tools
def test_llama_quantize_choices_are_reproduced_exactly(ladder):
    sizes = quant_ladder.size_check(ladder)
    assert all(not bad for bad in sizes.mismatches.values()), sizes.mismatches
    assert all(r["predicted_equals_file"] for r in sizes.rows)
