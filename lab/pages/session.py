"""The session a notebook starts (`session.start(globals())` in its second cell): lab.core.session's, with where
the profile's server runs (lab.serving.endpoint.where) worked out once, shown by notebooks 01–03 and written into
every record as `server_scope`. It lives here, in the top layer, because lab.core cannot import lab.serving."""
from __future__ import annotations

from collections.abc import Mapping

from lab.core import session as core_session
from lab.serving import endpoint


def start(profile: str | Mapping, run_dir: str = "") -> core_session.Session:
    """lab.core.session.start (see there: the notebook's globals, or a profile name or path) with `server_scope`."""
    return core_session.start(profile, run_dir, scope=endpoint.where)


def closing(s: core_session.Session, name: str):
    """Record `name`'s closing text, as the page wrote it into the record (Session.record's `closing`), as Markdown
    for a notebook cell: each page's `what_this_means(s)`."""
    from IPython.display import Markdown

    return Markdown(s.read(name)["what_this_means"])
