"""What every notebook calls, through its page (`from lab.pages import <page> as page`, the notebook's one lab
import; each page imports these names): the session a notebook starts (`page.start(profile, run_dir, settings)` in its second cell:
lab.core.session's, with where the profile's server runs, lab.serving.endpoint.where, worked out once, shown by
notebooks 01–03 and written into every record as `server_scope`; it lives here, in the top layer, because lab.core
cannot import lab.serving), the answer so far (`page.answer(s)`), a table (`page.show`) and the closing text."""
from __future__ import annotations

from collections.abc import Mapping

from lab.core import session as core_session
from lab.serving import endpoint


def start(profile: str, run_dir: str = "", settings: Mapping | None = None) -> core_session.Session:
    """lab.core.session.start (see there: the notebook's three parameters) with `server_scope`, and the kernel's
    variables: a profile papermill injected as variables (`-f params/X.yaml`) is the profile run, and a papermill run
    given no run_dir gets a folder of its own."""
    return core_session.start(profile, run_dir, settings, scope=endpoint.where, namespace=_kernel_variables())


def _kernel_variables() -> Mapping | None:
    """The notebook kernel's variables (IPython's user namespace), or None outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell.user_ns if shell is not None else None


def answer(s: core_session.Session):
    """The answer so far, at the top of every notebook: what fits, expected and measured speed, failed checks, the
    seeds' claims that do not hold (lab.records.answer.first)."""
    from lab.records import answer as run_answer

    return run_answer.first(s)


def show(data, empty: str | None = None):
    """A table for a notebook cell (lab.core.display.show: the lab's one rounding, an empty table said in words)."""
    from lab.core import display

    return display.show(data) if empty is None else display.show(data, empty=empty)


def checks_table(found: list):
    """A page's checks, worst first, as a table for a notebook cell (lab.core.checks.table)."""
    from lab.core import checks

    return checks.table(found)


def closing(s: core_session.Session, name: str):
    """Record `name`'s closing text, as the page wrote it into the record (Session.record's `closing`), as Markdown
    for a notebook cell: each page's `what_this_means(s)`."""
    from IPython.display import Markdown

    return Markdown(s.read(name)["what_this_means"])


def keep(s: core_session.Session, name: str, value):
    """Keep a notebook step's result in the session's accumulator (`s.results[name]`, a name in the user's words) and
    return it for the cell to show: the page's `record(s)` builds the notebook's record from what its steps kept (a cell
    run again replaces its result; a step not run leaves none, which the record says as None or empty)."""
    s.results[name] = value
    return value
