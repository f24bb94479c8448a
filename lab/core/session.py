"""What the second cell of every notebook calls: load the profile, find the run folder, and set the
display up the lab's way (lab.core.display: tables that are never truncated; charts stored as plotly figure
JSON only — `plotly_mimetype` — which JupyterLab draws with the plotly extension the `plotly` package
ships, so an executed notebook does not carry its own 4.6 MB copy of plotly.js; report.html embeds
plotly.js once per run and re-draws every chart from the records)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.core import evidence, profiles
from lab.core.profiles import Profile


@dataclass(frozen=True)
class Session:
    profile: Profile
    profile_path: Path
    run_dir: Path

    def record(self, name: str, data: dict) -> Path:
        """Write records/<name>.json into this run with provenance."""
        return evidence.write_record(self.run_dir, name, data, self.profile_path)

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"


def start(profile: str, run_dir: str = "") -> Session:
    """Load and validate `profile` (name or path) and open the run folder (a fresh one if empty)."""
    import plotly.io as pio

    from lab.core import display

    pio.renderers.default = "plotly_mimetype"
    display.install()
    path = profiles.resolve(profile)
    prof = profiles.load(path)
    return Session(prof, path.resolve(), evidence.notebook_run_dir(run_dir, prof.name))
