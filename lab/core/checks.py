"""One shape for every check the lab makes (MLPerf-loadgen style: a verdict plus what to do)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

# not-run: a plan-mode run (lab.core.planmode) lists the check it would make on the profile's hardware; it counts
# like skip (nothing was compared), never as a failure.
Status = Literal["pass", "warn", "fail", "skip", "not-run"]
STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3, "not-run": 4}
QUIET = ("skip", "not-run")  # statuses that say nothing was compared


@dataclass(frozen=True)
class Check:
    """name: what was checked; observed/expected: the two values compared; fix: what to do when
    it is not `pass`; source: where the rule or number comes from."""

    name: str
    status: Status
    observed: Any
    expected: Any
    fix: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def from_dicts(rows: list[dict]) -> list[Check]:
    """The checks a record holds (what `Check.to_dict` wrote), as Checks again: a record's checks are shown from it."""
    return [Check(**r) for r in rows]


def worst(checks: list[Check]) -> Status:
    """The overall verdict of a list of checks: fail > warn > pass; all skipped → skip; all not run → not-run."""
    if not checks:
        return "skip"
    compared = [c.status for c in checks if c.status not in QUIET]
    if compared:
        return min(compared, key=lambda s: STATUS_ORDER[s])
    return "not-run" if all(c.status == "not-run" for c in checks) else "skip"


def table(checks: list[Check]):
    """Checks as a pandas DataFrame, worst first (for notebooks)."""
    import pandas as pd

    rows = [c.to_dict() for c in sorted(checks, key=lambda c: STATUS_ORDER[c.status])]
    return pd.DataFrame(rows, columns=["name", "status", "observed", "expected", "fix", "source"])


def chart(checks: list[Check], title: str):
    """A bar chart of how many checks ended in each status."""
    import plotly.graph_objects as go

    colours = {"pass": "#2ca02c", "warn": "#ff7f0e", "fail": "#d62728", "skip": "#7f7f7f", "not-run": "#9fa8da"}
    counts = {s: sum(c.status == s for c in checks) for s in colours}
    fig = go.Figure(go.Bar(x=list(counts), y=list(counts.values()), marker_color=list(colours.values()),
                           text=list(counts.values()), textposition="auto"))
    fig.update_layout(title=title, xaxis_title="status", yaxis_title="checks", height=320)
    return fig
