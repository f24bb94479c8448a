"""What the tiers of tests/unit/test_quantize.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
import pytest

from lab.core import profiles
from lab.model import quant_ladder


# ---------------------------------------------------------------- integration: the real files and tools
@pytest.fixture(scope="module")
def ladder():
    profile = profiles.load("cpu-default")
    ref = quant_ladder.f16_reference(profile, progress=False)
    return quant_ladder.build_ladder(ref, progress=False)
