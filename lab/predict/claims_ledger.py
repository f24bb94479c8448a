"""The claims ledger as data: every numeric claim of the two seed guides (lab/data/seed_claims.yaml: the
verbatim quote, English, condition, value, how to test it, source), checked on load, and the one vocabulary
of verdicts a claim can get:

    consistent                   the numbers agree (arithmetic, documentation or our measurement)
    contradicted by measurement  a measurement on the same hardware and engine disagrees: ours, or, without one,
                                 a published row the claim names (lab.predict.claim_published)
    contradicted by facts        arithmetic on the published config or a documented rule disagrees
    impossible by physics        above the memory-bandwidth roofline even with generous assumptions
    not testable here            needs hardware, a meter or a price list this run does not have

lab.predict.claim_evaluators works each test kind out; lab.predict.claims judges the ledger with them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

from lab.core import facts

Verdict = Literal["consistent", "contradicted by measurement", "contradicted by facts", "impossible by physics",
                  "not testable here"]
VERDICTS: tuple[str, ...] = ("consistent", "contradicted by measurement", "contradicted by facts",
                             "impossible by physics", "not testable here")
TEST_KINDS = ("decode_ceiling", "aggregate_ceiling", "weights_size", "kv_size", "kv_ratio", "context_fit", "compat",
              "gpu_spec", "arithmetic", "documented", "untestable", "layers", "total_memory")
# The verdicts that say a claim does not hold (the answer card lists these).
NOT_HOLDING = ("impossible by physics", "contradicted by measurement", "contradicted by facts")


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim judged: what the seed says, the verdict, the numbers behind it and why."""

    id: str
    seed: str
    kind: str
    quote: str
    english: str
    value: Any
    unit: str
    condition: dict
    verdict: str
    explanation: str
    numbers: dict = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self) -> dict:
        """A flat row for the ledger table."""
        value = "–".join(str(v) for v in self.value) if isinstance(self.value, list) else str(self.value)
        return {"id": self.id, "seed": self.seed[:3], "kind": self.kind, "claim": self.english,
                "value": f"{value} {self.unit}".strip(), "verdict": self.verdict, "why": self.explanation,
                "quote": self.quote}


# ---------------------------------------------------------------- the ledger as data
@lru_cache(maxsize=1)
def ledger() -> dict:
    """lab/data/seed_claims.yaml, checked: unique ids and quotes, a known test kind, values present, verdicts valid."""
    data = facts.load("seed_claims", "claims")
    ids = [c.get("id") for c in data["claims"]]
    if len(ids) != len(set(ids)):
        raise facts.DataError("seed_claims.yaml: duplicate claim ids")
    for c in data["claims"]:
        for key in ("id", "seed", "quote", "english", "kind", "condition", "value", "unit", "test"):
            if key not in c:
                raise facts.DataError(f"seed_claims.yaml: claim {c.get('id')!r} has no {key!r}")
        kind = c["test"].get("kind")
        if kind not in TEST_KINDS:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: unknown test kind {kind!r}; known: {TEST_KINDS}")
        if kind == "documented" and c["test"].get("verdict") not in VERDICTS:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: documented verdict must be one of {VERDICTS}")
        model = c["condition"].get("model")
        if model is not None and model not in data["model_classes"]:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: unknown model class {model!r}")
    return data


def claims() -> list[dict]:
    return ledger()["claims"]


def model_class(name: str) -> dict:
    """The class entry: `model` (judged: the seeds' model for "27b"), `comparisons` (shown beside it only)."""
    return ledger()["model_classes"][name]
