"""Shapes: a FAKE server (tests/fake_endpoints.py hostile_server "wrong_types", in a thread) answers every route
with fields of another type than the engine documents — /props with "default_generation_settings": "x" or n_ctx as
a list, /v1/models with a size "big" and a string for an entry, /slots with "maybe" for a boolean, completions with
"choices": "x", streamed chunks with a number for text and a list for a chunk. Notebook 04's path (discovery, smoke
test, checks, record), the manifest's server section and notebook 06's load generator each give findings that name
the route and the field, never an exception; the record is written. Figure: hostile replies tried / read as a
finding without a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import record_figure
from fake_endpoints import WRONG_PROPS, endpoint_profile, hostile_server

from lab.core import evidence, profiles
from lab.measure import loadgen, metrics
from lab.records import manifest, report
from lab.serving import endpoint, engines, serve, shapes
from lab.pages import serve as serve_page



def _profile(tmp_path: Path, base: str) -> profiles.Profile:
    return endpoint_profile(tmp_path, base, "shapes-unit", served_model="m")


@pytest.mark.parametrize("variant", sorted(WRONG_PROPS))
def test_wrong_types_become_findings_on_the_run_path(variant, tmp_path):
    with hostile_server("wrong_types", props=variant) as base:
        prof = _profile(tmp_path, base)
        command = engines.build_command(prof)
        server = serve.connect(command, timeout_s=10)  # /v1/models answers (wrongly): healthy
        smoke = serve.smoke_test(server)
        found = endpoint.discover_server(server)
        checks = serve_page.serve_checks(None, server, smoke, None, discovery=found)
        record = serve_page.build_record(command, [], None, server, smoke, {}, None, checks, discovery=found)
        written = evidence.write_record(tmp_path / "run", "04_serve", record)
        # a run whose 04 failed before its record: the manifest asks the server itself, then the report is built
        bare_run = tmp_path / "bare-run"
        (bare_run / "records").mkdir(parents=True)
        manifest.write(bare_run, prof, tmp_path / "shapes-unit.yaml", evidence.utc_now(),
                       [{"notebook": "04_serve", "status": "failed", "error": "stand-in"}])
        built = report.build(bare_run)
        report.build(tmp_path / "run")
        run = loadgen.run_load(loadgen.Target(base, model="m", max_tokens=4), loadgen.make_prompts(3, 8, seed=9),
                               loadgen.LoadSpec(concurrency=1, max_requests=2))
        tokens = loadgen.count_tokens(base, "hello")
    text = serve_page.discovery_text(found)
    findings = serve_page.shape_findings(smoke, found)
    expected = {  # route → a field of it that must be named in a finding
        "GET /props": "default_generation_settings" if variant == "settings_string" else "default_generation_settings.n_ctx",
        "GET /v1/models": "data.0.meta.n_ctx_train", "GET /slots": "0.is_processing", "GET /version": "version",
        "POST /v1/completions": "choices", "POST /v1/chat/completions": "choices.0.message"}
    named = {route: any(f.startswith(f"{route}: {field}") for f in findings) for route, field in expected.items()}
    summary = metrics.summarise_run(run)
    stream_ok = (all(r.success for r in run.results) and all(r.findings for r in run.results)
                 and any("unexpected type" in w for w in summary["validity"]["warnings"]))
    handled = sum(named.values()) + stream_ok
    record_figure(f"replies of unexpected types ({variant}) read as findings, no traceback", len(expected) + 1, handled)
    assert named == dict.fromkeys(expected, True), findings
    assert stream_ok, [(r.error, r.findings) for r in run.results]
    # what the lab could read it still reports; the wrong fields are "not reported"
    assert found["engine"] == "llama.cpp" and found["facts"]["context_per_request"] is None
    assert found["facts"]["model_ids"] == ["m"] and found["facts"]["model_bytes"] is None
    assert "field(s) of an unexpected type" in text
    shape_check = next(c for c in checks if c.name == "replies of the documented shape")
    assert shape_check.status == "warn" and not smoke["completions"]["ok"]
    assert json.loads(written.read_text())["summary"]["shape_findings"] == len(findings)
    written_manifest = json.loads((bare_run / "manifest.json").read_text())
    assert written_manifest["status"] == "failed" and written_manifest["server"]["engine_found"] == "llama.cpp"
    assert built.read_text().rstrip().endswith("</html>") and (tmp_path / "run" / "report.html").exists()
    assert tokens is None  # "tokens": "abc", "count": "many": not a count


def test_clean_never_raises_and_keeps_what_is_right():
    cases = [("llama.props", {"default_generation_settings": {"n_ctx": "4096"}, "total_slots": 2}),
             ("llama.props", ["a", "list"]), ("llama.slots", {"not": "a list"}), ("chunk", {"choices": [None, 3]}),
             ("models", {"data": [{"id": ["x"]}, {"id": "ok", "meta": {"size": float("nan")}}]}),
             ("completion", {"choices": [{"text": "hi", "finish_reason": ["stop"]}]}), ("version", 42)]
    out = [shapes.clean(name, data, "GET /x") for name, data in cases]
    assert out[0] == ({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2}, [])  # a numeric string is a number
    assert out[1][0] is None and out[1][1] == ["GET /x: expected an object, got a list ['a', 'list']; not used"]
    assert out[2][0] is None and out[3][0] == {"choices": []} and len(out[3][1]) == 1 and "(2 entries)" in out[3][1][0]
    assert out[4][0] == {"data": [{}, {"id": "ok", "meta": {}}]} and len(out[4][1]) == 2
    assert out[5][0] == {"choices": [{"text": "hi"}]} and "finish_reason" in out[5][1][0]
    assert out[6] == (None, ["GET /x: expected an object, got a number 42; not used"])
