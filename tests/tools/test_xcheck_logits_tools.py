"""The tools tier of tests/unit/test_xcheck_logits.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import numpy as np
import pytest

from lab.model import xcheck_logits


@pytest.mark.tools
def test_a_failing_child_raises_with_its_last_words(tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(xcheck_logits.CrosscheckFailed, match=r"not-a-model.gguf: exit code 1"):
        xcheck_logits.logits(bad, np.arange(8), 4, 2, 2, 1, tmp_path / "work", timeout_s=120)


@pytest.mark.tools
def test_logits_come_back_as_float64_and_leave_no_file(smol_model, tmp_path):
    work = tmp_path / "work"
    got = xcheck_logits.logits(smol_model, np.arange(100, 132), 16, 2, 8, 1, work, timeout_s=120)
    assert got.dtype == np.float64 and got.shape == (2 * (16 - 8 - 1), 49152)  # SmolLM2's vocabulary
    assert np.isfinite(got).all() and np.array_equal(got, got.astype(np.float32).astype(np.float64))  # float32 values
    assert not list(work.glob("logits-*"))  # read, then removed: nothing left in the lab's cache
