"""What the tiers of tests/unit/test_reliability_exposure.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
import pytest

from conftest import record_figure


RESULTS: dict[str, bool] = {}




def check(name: str, ok: bool) -> bool:
    RESULTS[name] = bool(ok)
    return ok


@pytest.fixture(scope="session", autouse=True)  # once, after all: the unit tier runs this file's pure tests first
def figure():
    yield
    record_figure("exposure checks", len(RESULTS), sum(RESULTS.values()),
                  "failed: " + ", ".join(k for k, v in RESULTS.items() if not v) if not all(RESULTS.values()) else "")
