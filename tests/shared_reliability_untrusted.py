"""What the tiers of tests/unit/test_reliability_untrusted.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
from conftest import ROOT, cli_output


LOGS = ROOT / "tests" / "troubleshoot_logs"


_cli = cli_output
