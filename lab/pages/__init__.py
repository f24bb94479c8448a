"""The notebooks' pages: one module per notebook, named in the user's words, holding that notebook's tables,
charts, record and closing text (`what_this_means(s)`, the same name in every page) and nothing else; what they
show is measured and predicted by the layers below (lab.experiments, lab.measure, lab.predict, lab.serving, ...).

    01_hardware_checks.ipynb      lab.pages.hardware
    02_install_verification.ipynb lab.pages.install
    03_quantize.ipynb             lab.pages.quantize
    04_serve.ipynb                lab.pages.serve
    05_kv_cache_math.ipynb        lab.pages.kv_cache
    06_benchmarking.ipynb         lab.pages.benchmark
    07_troubleshooting.ipynb      lab.pages.troubleshoot

A notebook imports its page and nothing else from lab; every page takes start, answer and show from lab.pages.session
(the session, with where the server runs) and names the notebook's steps in the user's words. Each step keeps what
the record needs in the session's one accumulator (`s.results`, lab.pages.session.keep), and the page writes its
record one way, `record(s)`: built from what the steps kept (lab.core.session.Session.record: provenance, mode,
server_scope, and the closing text built from the record as written, kept in it as `what_this_means`);
`what_this_means(s)` shows that text from the record.
"""


def closing_text(record: dict) -> str | None:
    """A record's closing text built by its page now, for a record written before records kept it (`lab report` on
    an older run folder: lab.records.report.closing_text's fallback); None for a record no page closes."""
    from lab.diagnose import endpoint_diagnose
    from lab.pages import benchmark, hardware, install, kv_cache, quantize, serve, troubleshoot

    pages = {page.NAME: page.closing_text for page in (hardware, install, quantize, serve, kv_cache, benchmark, troubleshoot)}
    pages[troubleshoot.ENDPOINT] = endpoint_diagnose.what_this_means
    closing = pages.get(record.get("record"))
    return closing(record) if closing else None
