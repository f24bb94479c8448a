"""What the second cell of every notebook calls: load the profile, find the run folder, and set the
display up the lab's way (lab.core.display: tables that are never truncated; charts stored as plotly figure
JSON only — `plotly_mimetype` — which JupyterLab draws with the plotly extension the `plotly` package
ships, so an executed notebook does not carry its own 4.6 MB copy of plotly.js; report.html embeds
plotly.js once per run and re-draws every chart from the records).

The cell passes the notebook's globals (`session.start(globals())`), so papermill used the way its own docs
show works or refuses, never silently runs another profile:

    papermill notebooks/01_hardware_checks.ipynb out.ipynb -f params/v100-32g-x1.yaml   # runs v100-32g-x1
    papermill notebooks/01_hardware_checks.ipynb out.ipynb -p profile v100-32g-x1       # the same profile
    papermill notebooks/01_hardware_checks.ipynb out.ipynb -y "$(cat my-box.yaml)"      # a profile inline

`-f`/`-y` inject the profile's keys (name, gpu_count, ...) as variables; the parameters cell only reads
`profile`, so without this the notebook ran its default profile and said so everywhere. See `decide`.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab.core import evidence, planmode, profile_file, profiles, run_folder
from lab.core.profiles import Profile, ProfileError

# The notebooks' own parameters (the cell tagged `parameters`: tests/unit/test_notebooks_hygiene.py, runner.py), and
# the two papermill itself injects with --inject-paths (--inject-input-path / --inject-output-path).
NOTEBOOK_PARAMETERS = ("profile", "run_dir")
PAPERMILL_OWN = ("PAPERMILL_INPUT_PATH", "PAPERMILL_OUTPUT_PATH")
# papermill writes the injected cell (tagged `injected-parameters`, placed after the `parameters` cell) as this
# comment line, then one `name = <Python literal>` line per parameter (papermill/translators.py, PythonTranslator:
# codify = comment("Parameters") + assign(name, translate(value)); Black may re-wrap the lines when installed).
INJECTED_HEADER = "# Parameters"


@dataclass(frozen=True)
class Session:
    profile: Profile
    profile_path: Path
    run_dir: Path
    # Where the profile's server runs, as this machine sees it (lab.serving.endpoint.where: here, or a server the
    # user runs elsewhere whose box no check here can see). Computed once at start by the caller that may import
    # lab.serving (lab.pages.session.start); None for a session started without it (tests, scripts).
    server_scope: dict | None = None

    @property
    def mode(self) -> str:
        """"plan" (the profile's hardware is not here, or --plan-only: lab.core.planmode) or "measure"."""
        return planmode.mode(self.profile)

    def record(self, name: str, data: dict, closing: Callable[[dict], str] | None = None) -> Path:
        """Write records/<name>.json into this run with provenance, its mode (plan: nothing in it was measured
        on the profile's hardware, its numbers are predictions) and the session's `server_scope`.

        `closing`: the page's closing text from a record (lab.pages.<page>.closing_text). It is built from the record
        as written (read back from disk, so it says only what the record holds) and kept in it as `what_this_means`:
        the notebook's last cell and report.html show that text, and the report needs no page code."""
        why = planmode.reason(self.profile)
        data = {**data, "mode": "plan" if why else "measure", **({"plan_reason": why} if why else {})}
        if self.server_scope is not None:
            data["server_scope"] = self.server_scope
        path = evidence.write_record(self.run_dir, name, data, self.profile_path)
        if closing is None:
            return path
        data["what_this_means"] = closing(run_folder.read_record_file(path))
        return evidence.write_record(self.run_dir, name, data, self.profile_path)

    def read(self, name: str) -> dict:
        """records/<name>.json of this run, or a one-line error saying which cell writes it."""
        path = self.run_dir / "records" / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not written yet in this run; run the notebook's record cell above first")
        return run_folder.read_record_file(path)

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"


@dataclass(frozen=True)
class Choice:
    """Which profile a notebook runs: a name or path (`profile`), or settings papermill injected (`settings`);
    `base`: the profile those settings change, when they are a few `-p KEY VALUE` rather than a whole profile."""
    profile: str | None
    settings: dict | None
    run_dir: str
    base: str | None = None


def injected_source(namespace: Mapping) -> str | None:
    """The source of the cell papermill injected, as this kernel ran it, or None (no papermill, or not a kernel).

    Why the kernel's input history (`In`, which IPython keeps in the user namespace, one entry per executed cell):
    a kernel cannot see cell tags or the notebook file (papermill writes the output file as it goes, and its path
    is not passed to the kernel), and comparing globals with the parameters cell's defaults cannot tell an
    injected `gpu_memory_utilisation` (a typo) from IPython's own names or the cell's imports. The history holds
    exactly the text papermill injected, so the names it assigned are known, unknown ones included. The latest
    such cell counts: papermill runs it just before this one; a re-run of an executed notebook in JupyterLab runs
    it again."""
    history = namespace.get("In")
    if not isinstance(history, list):
        return None
    for source in reversed(history):
        if isinstance(source, str) and source.lstrip().split("\n", 1)[0].strip() == INJECTED_HEADER:
            return source
    return None


def set_after_injection(namespace: Mapping) -> list[str]:
    """The notebook parameters that cells run after papermill's injected cell (and before this one) assign again:
    in JupyterLab, an executed notebook's parameters cell edited and re-run by hand. Its `profile` is then the
    user's latest word, and the injected settings still there would silently win: `decide` refuses instead."""
    history = namespace.get("In")
    source = injected_source(namespace)
    if source is None:
        return []
    start = len(history) - 1 - history[::-1].index(source)
    found = []
    for later in history[start + 1:-1]:  # the last entry is the cell running now
        try:
            tree = ast.parse(later) if isinstance(later, str) else None
        except SyntaxError:
            continue
        for node in (tree.body if tree else []):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):  # `profile: str = "..."`, as the parameters cell writes it
                targets = [node.target]
            else:
                continue
            found += [t.id for t in targets if isinstance(t, ast.Name) and t.id in NOTEBOOK_PARAMETERS]
    return sorted(set(found))


def parse_injected(source: str) -> dict:
    """papermill's injected cell → {name: value}, the values as papermill wrote them (Python literals)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProfileError(f"papermill's injected parameters cell is not Python (line {exc.lineno}: {exc.msg})") from None
    out = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ProfileError(f"papermill's injected parameters cell, line {node.lineno}: expected `name = value`, "
                               f"found {ast.unparse(node)[:80]!r}")
        name = node.targets[0].id
        try:
            out[name] = ast.literal_eval(node.value)
        except ValueError:
            raise ProfileError(f"papermill parameter {name!r}: {ast.unparse(node.value)[:80]} is not a plain value "
                               "(a number, string, true/false, null or a list of them)") from None
    return out


def _nearest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" — did you mean {close[0]!r}?" if close else ""


def decide(profile: str | None, run_dir: str, injected: Mapping | None, set_later: list[str] = ()) -> Choice:
    """The profile a notebook runs, from its `profile`/`run_dir` variables and what papermill injected (None: nothing).

    Only `profile` (the default, `-p profile X`, or `lab run`) → that profile. A whole profile's settings injected
    (`-f X.yaml`, `-y ...`) → a profile built from them, validated as `lab validate` validates a file; a few
    settings without `name` (`-p KEY VALUE`) → those settings of `profile` changed (`base`). A whole profile and
    `profile` both, or a
    name that is neither a notebook parameter nor a profile setting → a ProfileError naming them (papermill itself
    only warns "Passed unknown parameter" and runs on). `set_later`: the parameters a cell run by hand after the
    injected one assigned again (`set_after_injection`)."""
    injected = dict(injected or {})
    fields = list(Profile.model_fields)
    known = fields + list(NOTEBOOK_PARAMETERS) + list(PAPERMILL_OWN)
    problems = [f"papermill parameter {name!r} is neither a notebook parameter ({', '.join(NOTEBOOK_PARAMETERS)}) nor "
                f"a profile setting{_nearest(name, known)}" for name in injected if name not in known]
    settings = {k: v for k, v in injected.items() if k in fields}
    # `-p KEY VALUE` alone (no `name`: not a whole profile from -f) changes those settings of the profile the notebook
    # names (its parameters cell, or `-p profile X`): what a learner trying one setting means
    if settings and "name" not in settings and not problems and "profile" not in set_later:
        base = injected.get("profile", profile)
        if not isinstance(base, str) or not base:
            raise ProfileError(f"-p {', '.join(settings)}: no profile to change; add -p profile NAME")
        return Choice(None, settings, run_dir, base)
    if settings and "profile" in injected:
        shown = ", ".join(list(settings)[:4]) + (f", … {len(settings)} in all" if len(settings) > 4 else "")
        problems.append(f"papermill injected both profile={injected['profile']!r} and profile settings ({shown}): give "
                        "one, `-p profile NAME` for a profile file, or `-f params/NAME.yaml` alone (`-p KEY VALUE` "
                        "after it changes one setting)")
    if settings and "profile" in set_later:
        problems.append(f"profile={profile!r} was set by a cell run after papermill's injected parameters (which hold "
                        "the settings of a profile): re-run the injected-parameters cell to use those, or delete it to "
                        "use the profile named in the parameters cell")
    if problems:
        raise ProfileError("; ".join(problems))
    if settings:
        return Choice(None, settings, run_dir)
    if not isinstance(profile, str) or not profile:
        raise ProfileError(f"no profile: the notebook's `profile` parameter is {profile!r}; give a profile name or path "
                           "(-p profile cpu-default) or a profile's settings (-f params/cpu-default.yaml)")
    return Choice(profile, None, run_dir)


SETTINGS_SOURCE = "papermill's injected parameters"


def profile_from_settings(settings: dict, base: str | None = None) -> tuple[Profile, dict]:
    """The profile papermill's injected settings make, and its whole settings; or the ProfileError `lab validate`
    would give that file. `base`: the profile a few `-p KEY VALUE` change; its other settings are valid, so an
    error names only what was changed."""
    if base is None:
        return profiles.from_data(settings, SETTINGS_SOURCE), settings
    path = profiles.resolve(base)
    whole = {**profile_file.parse(path), **settings}
    source = f"{path} with {', '.join(f'-p {k} {v!r}' for k, v in settings.items())}"
    return profiles.from_data(whole, source), whole


def settings_copy(settings: dict, run_dir: Path, name: str) -> Path:
    """The injected settings written into the run folder, as the kernel read them: the file the records' provenance
    names (its sha256), so a run says exactly which settings it ran with. Named by content, never overwritten: the
    notebooks of one day share an interactive run folder and may be run with different settings."""
    body = yaml.safe_dump(settings, sort_keys=False, allow_unicode=True)
    path = run_dir / f"profile-{name}-injected-{hashlib.sha256(body.encode()).hexdigest()[:12]}.yaml"
    if not path.exists():
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(f"# Written by lab.core.session: the profile settings papermill injected into a notebook (its\n"
                       f"# injected-parameters cell, from -f/-y/-p), exactly as the notebook's kernel read them.\n{body}")
        tmp.replace(path)
    return path


def start(profile: str | Mapping, run_dir: str = "", scope: Callable[[Profile], dict] | None = None) -> Session:
    """Load and validate the profile and open the run folder (a fresh one if run_dir is empty).

    `profile`: the notebook's globals (`session.start(globals())`: the profile is decided from its parameters and
    what papermill injected, see `decide`), or a profile name or path. `scope`: profile → where its server runs
    (lab.serving.endpoint.where, which this layer cannot import: lab.pages.session passes it), kept as the
    session's `server_scope` and written into every record."""
    import plotly.io as pio

    from lab.core import display

    if isinstance(profile, Mapping):
        source = injected_source(profile)
        choice = decide(profile.get("profile"), profile.get("run_dir", ""),
                        parse_injected(source) if source is not None else None, set_after_injection(profile))
    else:
        choice = Choice(profile, None, run_dir)
    pio.renderers.default = "plotly_mimetype"
    display.install()
    if choice.settings is not None:
        prof, whole = profile_from_settings(choice.settings, choice.base)
        folder = evidence.notebook_run_dir(choice.run_dir, prof.name)
        return Session(prof, settings_copy(whole, folder, prof.name).resolve(), folder,
                       scope(prof) if scope else None)
    path = profiles.resolve(choice.profile)
    prof = profiles.load(path)
    return Session(prof, path.resolve(), evidence.notebook_run_dir(choice.run_dir, prof.name), scope(prof) if scope else None)
