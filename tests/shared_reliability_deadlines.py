"""What the tiers of tests/unit/test_reliability_deadlines.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
from __future__ import annotations


BUDGET_S = 2.0
BOUND_S = 30.0  # budget + grace + margin; the bug: 300 s per request, or for ever for a trickle
