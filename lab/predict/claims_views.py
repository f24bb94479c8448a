"""Views of the judged claims: the ledger table, the claims of some kinds, and the arithmetic per model."""
from __future__ import annotations

from lab.predict.claims_ledger import ClaimVerdict


def table(items: list[ClaimVerdict]):
    """The ledger as a pandas DataFrame (one row per claim)."""
    import pandas as pd

    return pd.DataFrame([x.row() for x in items])


def of_kinds(items: list[ClaimVerdict], *kinds: str) -> list[ClaimVerdict]:
    """The verdicts of the given claim kinds (notebook 03 shows "size", notebook 05 "kv" and "layers")."""
    return [x for x in items if x.kind in kinds]


def models_table(items: list[ClaimVerdict]):
    """The arithmetic behind each verdict, one row per model: the judged model, then the comparisons."""
    import pandas as pd

    return pd.DataFrame([{"claim": x.id, "verdict": x.verdict, **r} for x in items
                         for r in x.numbers.get("models", [])])
