"""What the second cell of every notebook calls: load the profile, find the run folder, set charts
up so they survive export (plotly's default renderer under papermill keeps only a JSON mimetype that
nbconvert's HTML export drops; `plotly_mimetype+notebook` also embeds plotly.js, offline)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab import evidence, profiles
from lab.profiles import Profile


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

    pio.renderers.default = "plotly_mimetype+notebook"
    path = profiles.resolve(profile)
    prof = profiles.load(path)
    return Session(prof, path.resolve(), evidence.notebook_run_dir(run_dir, prof.name))
