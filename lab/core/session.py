"""What the second cell of every notebook calls: load the profile, find the run folder, and set the
display up the lab's way (lab.core.display: tables that are never truncated; charts stored as plotly figure
JSON only — `plotly_mimetype` — which JupyterLab draws with the plotly extension the `plotly` package
ships, so an executed notebook does not carry its own 4.6 MB copy of plotly.js; report.html embeds
plotly.js once per run and re-draws every chart from the records).

The profile arrives once, as the notebook's three parameters, which the cell passes as arguments
(`page.start(profile, run_dir, settings)`):

    profile   a name (params/<name>.yaml) or a path: what a notebook opened by hand in JupyterLab runs
    run_dir   the run folder ("" → outputs/<profile>/interactive-<UTC date>/)
    settings  a profile's settings: `lab run` passes the whole profile it validated (nothing is read again);
              a mapping without `name` changes those settings of `profile` (papermill -y "settings: {threads: 8}")

    papermill notebooks/01_hardware_checks.ipynb out.ipynb -p profile v100-32g-x1          # that profile
    papermill notebooks/01_hardware_checks.ipynb out.ipynb -p profile params/my-box.yaml   # a file
    papermill notebooks/01_hardware_checks.ipynb out.ipynb -y "settings: {threads: 8}"     # cpu-default, 8 threads

    papermill notebooks/01_hardware_checks.ipynb out.ipynb -f params/v100-32g-x1.yaml      # that profile, too

papermill's `-f params/X.yaml` injects the profile's keys as the kernel's variables (papermill warns "Passed
unknown parameter" for each: the parameters cell names three): `start` takes them as the profile
(`injected_profile`), validated like any profile. A papermill run given no run_dir gets a folder of its own
(`papermill_run_dir`).
"""
from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab.core import display, evidence, paths, planmode, profile_file, profiles, run_folder
from lab.core.profiles import Profile, ProfileError

# The notebooks' own parameters: the cell tagged `parameters` (tests/unit/test_notebooks_hygiene.py, runner.py).
NOTEBOOK_PARAMETERS = ("profile", "run_dir", "settings")


@dataclass(frozen=True)
class Session:
    profile: Profile
    profile_path: Path
    run_dir: Path
    # Where the profile's server runs, as this machine sees it (lab.serving.endpoint.where: here, or a server the
    # user runs elsewhere whose box no check here can see). Computed once at start by the caller that may import
    # lab.serving (lab.pages.session.start); None for a session started without it (tests, scripts).
    server_scope: dict | None = None
    # What the notebook's steps produced, kept by its page's functions as they run, in the order they ran: the page's
    # `record(s)` builds the notebook's record from it (one accumulator per notebook, one way to write its record).
    results: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def mode(self) -> str:
        """"plan" (the profile's hardware is not here, or --plan-only: lab.core.planmode) or "measure"."""
        return planmode.mode(self.profile)

    def record(self, name: str, data: dict, closing: Callable[[dict], str] | None = None) -> Path:
        """Write records/<name>.json into this run with provenance, its mode (plan: nothing in it was measured
        on the profile's hardware, its numbers are predictions) and the session's `server_scope`.

        `closing`: the page's closing text from a record (lab.pages.<page>.closing_text). It is built from the record
        exactly as it will be written (evidence.write_record: its JSON text read back in memory, so it says only what
        the record holds) and kept in it as `what_this_means`: the notebook's last cell and report.html show that
        text, and the report needs no page code. The file is written once, checked against the record schema first."""
        why = planmode.reason(self.profile)
        data = {**data, "mode": "plan" if why else "measure", **({"plan_reason": why} if why else {})}
        if why and isinstance(data.get("checks"), list):  # what only the card can answer is not-run, not skipped
            data["checks"] = planmode.card_only([c.to_dict() if hasattr(c, "to_dict") else c for c in data["checks"]],
                                                why)
        if self.server_scope is not None:
            data["server_scope"] = self.server_scope
        return evidence.write_record(self.run_dir, name, data, self.profile_path, closing=closing)

    def read(self, name: str) -> dict:
        """records/<name>.json of this run, or a one-line error saying which cell writes it."""
        path = self.run_dir / "records" / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not written yet in this run; run the notebook's record cell above first")
        return run_folder.read_record_file(path)

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"


SETTINGS_SOURCE = "the notebook's `settings` parameter"


def chosen_profile(profile: str, settings: Mapping | None) -> tuple[Profile, dict | None]:
    """The profile a notebook runs, and the settings to keep a copy of (None: the profile's own file names it).

    No settings → the profile file `profile` names (a notebook opened by hand, `-p profile X`). A whole profile's
    settings (they hold `name`: what `lab run` passes) → that profile, validated as `lab validate` validates a file.
    A few settings without `name` (`-y "settings: {threads: 8}"`) → those settings of `profile` changed; a bad value
    gets only its own message, naming what was changed."""
    if settings is not None and not isinstance(settings, Mapping):
        raise ProfileError(f"the notebook's `settings` parameter is {type(settings).__name__} "
                           f"{display.clip(profile_file.redact_settings(str(settings), {'server_args': str(settings).split()}), 60)!r}, "
                           "not a mapping of profile settings: pass it as YAML, -y \"settings: {threads: 8}\"")
    if not settings:
        if not isinstance(profile, str) or not profile:
            raise ProfileError(f"no profile: the notebook's `profile` parameter is {profile!r}; give a profile name or "
                               "path (-p profile cpu-default)")
        return profiles.load(profiles.resolve(profile)), None
    settings = dict(settings)
    if "name" in settings:
        return profiles.from_data(settings, SETTINGS_SOURCE), settings
    path = profiles.resolve(profile)
    whole = {**profile_file.parse(path), **settings}
    # what was changed, through the one redaction of profile messages (`server_args: [--api-key, K]` shows no K): the
    # message reaches the executed notebook and papermill's stderr
    changed = ", ".join(f"{display.clip(str(k), 40)}: {profile_file.clip(v, 80)}"
                            for k, v in itertools.islice(settings.items(), 20))
    source = f"{path} with settings {profile_file.redact_settings(changed, settings)}"
    return profiles.from_data(whole, source), whole


INJECTED_SOURCE = "the profile papermill passed as parameters (-f FILE)"


def injected_profile(namespace: Mapping | None) -> dict | None:
    """The profile papermill injected as the kernel's variables (`papermill NB OUT -f params/X.yaml`: papermill runs
    a notebook "with parameter files for each hardware profile"), as settings, or None. `name` and `description` give
    it away: every profile has both, and no notebook cell assigns either (tests/unit/test_notebook_imports.py checks
    the notebooks); a learner's section values (`context_tokens = 131072`) are not a profile. Every profile field
    the kernel holds is taken, and validated as any profile is (`chosen_profile`)."""
    if not namespace or not all(isinstance(namespace.get(k), str) for k in ("name", "description")):
        return None
    return {k: namespace[k] for k in Profile.model_fields if k in namespace}


def papermill_ran(namespace: Mapping | None) -> bool:
    """Whether papermill ran this notebook with parameters: the cell it injects starts "# Parameters" (its Python
    translator's comment) and is in the kernel's input history."""
    return any(str(cell).startswith("# Parameters") for cell in (namespace or {}).get("In") or [])


def papermill_run_dir(profile_name: str) -> Path:
    """outputs/<profile>/papermill-<UTC time>/ (-2, -3 … when taken): a papermill run given no run_dir gets a folder
    of its own, claimed with one mkdir, so a second run does not overwrite the first's records (the day's interactive
    folder is for notebooks opened by hand, which share what they measured). Not named like `lab run`'s folders
    (<UTC>_<sha>), whose missing manifest.json would read as a cut run."""
    import datetime as dt

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        folder = evidence.OUTPUTS / profile_name / (f"papermill-{stamp}" if n == 1 else f"papermill-{stamp}-{n}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{evidence.OUTPUTS / profile_name}: 999 papermill-{stamp}* folders already")


def shipped_file(whole: dict) -> Path | None:
    """params/<name>.yaml when `whole` is exactly that file's settings (papermill -f params/X.yaml): the records then
    name the shipped file, as `-p profile X` does, instead of a copy."""
    path = paths.PARAMS / f"{whole.get('name')}.yaml" if isinstance(whole.get("name"), str) else None
    try:
        return path if path is not None and path.is_file() and profile_file.parse(path) == whole else None
    except ProfileError:
        return None


def settings_copy(settings: dict, run_dir: Path, name: str) -> Path:
    """The settings a notebook was given, written into the run folder as the kernel read them: the file the
    records' provenance names (its sha256), so a run says exactly which settings it ran with. Named by content,
    never overwritten: the notebooks of one run share one copy, and the notebooks of one day share an interactive
    run folder and may be run with different settings."""
    body = yaml.safe_dump(settings, sort_keys=False, allow_unicode=True)
    path = run_dir / f"profile-{name}-settings-{hashlib.sha256(body.encode()).hexdigest()[:12]}.yaml"
    if not path.exists():  # whole or not at all, never through a link planted as its `.partial` (evidence.write_whole)
        evidence.write_whole(path, "# Written by lab.core.session: the profile settings a notebook was given (its "
                             "`settings`\n# parameter: the profile `lab run` validated, or papermill -y), exactly as its "
                             f"kernel read them.\n{body}")
    return path


def profile_name_of(path: str | Path) -> str:
    """The profile a record's `profile_file` is of: params/X.yaml → "X", a settings copy
    (profile-X-settings-<sha>.yaml, `settings_copy`) → "X", not the copy's file name."""
    stem = Path(path).stem
    m = re.fullmatch(r"profile-(.+)-settings-[0-9a-f]{12}", stem)
    return m[1] if m else stem


def start(profile: str, run_dir: str = "", settings: Mapping | None = None,
          scope: Callable[[Profile], dict] | None = None, namespace: Mapping | None = None) -> Session:
    """Validate the profile the notebook's parameters name (`chosen_profile`) and open the run folder (a fresh one
    if run_dir is empty). Settings passed in are written into the run folder (`settings_copy`): the file the
    records' provenance names. `scope`: profile → where its server runs (lab.serving.endpoint.where, which this
    layer cannot import: lab.pages.session passes it), kept as the session's `server_scope` and written into every
    record. `namespace`: the kernel's variables, only to refuse a profile papermill injected as variables
    (`injected_profile`)."""
    import plotly.io as pio

    from lab.core import display

    injected, shipped = injected_profile(namespace), None
    if injected is not None:  # -f params/X.yaml: that profile, with any -y settings over it
        extra = {k: v for k, v in (settings or {}).items() if k != "name"} if isinstance(settings, Mapping) else {}
        whole = {**injected, **extra}
        prof, shipped = profiles.from_data(whole, INJECTED_SOURCE), shipped_file(whole)
    else:
        prof, whole = chosen_profile(profile, settings)
    pio.renderers.default = "plotly_mimetype"
    display.install()
    if not run_dir and papermill_ran(namespace):
        run_dir = str(papermill_run_dir(prof.name))
    folder = evidence.notebook_run_dir(run_dir, prof.name)
    path = profiles.resolve(profile) if whole is None else shipped or settings_copy(whole, folder, prof.name)
    return Session(prof, path.resolve(), folder, scope(prof) if scope else None)
