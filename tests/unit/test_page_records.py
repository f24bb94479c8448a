"""A page gathers its notebook's results in one accumulator (the session's `results`, filled by the page's steps as
they run: lab.pages.session.keep) and writes its record one way: `page.record(s)`, the same signature on every page."""
import inspect

import pytest

from lab.core import profiles
from lab.core.session import Session
from lab.pages import benchmark, hardware, install, kv_cache, quantize, serve, session, troubleshoot

PAGES = (hardware, install, quantize, serve, kv_cache, benchmark, troubleshoot)


@pytest.mark.parametrize("page", PAGES, ids=[p.__name__.rsplit(".", 1)[1] for p in PAGES])
def test_every_page_writes_its_record_from_the_session_alone(page):
    assert list(inspect.signature(page.record).parameters) == ["s"]


@pytest.mark.parametrize("name", ["endpoint_record", "record_tune", "record_speculative"])
def test_the_other_records_too(name):
    page = troubleshoot if name == "endpoint_record" else benchmark
    assert list(inspect.signature(getattr(page, name)).parameters) == ["s"]


def _session(tmp_path) -> Session:
    return Session(profiles.load("cpu-default"), profiles.resolve("cpu-default"), tmp_path)


def test_a_step_keeps_its_result_and_a_rerun_replaces_it(tmp_path):
    s = _session(tmp_path)
    assert session.keep(s, "bandwidth", {"gb_s": 1.0}) == {"gb_s": 1.0}
    session.keep(s, "bandwidth", {"gb_s": 2.0})
    assert s.results == {"bandwidth": {"gb_s": 2.0}}
    assert _session(tmp_path).results == {}  # one accumulator per notebook session


def test_reproductions_are_kept_by_pitfall_in_the_order_they_ran(tmp_path):
    s = _session(tmp_path)
    s.results["reproductions"] = {"port in use": ["a", "b"], "truncated GGUF": "c"}
    s.results["reproductions"]["port in use"] = ["a2", "b2"]  # a cell run again keeps its place
    assert troubleshoot.reproductions(s) == ["a2", "b2", "c"]


def test_the_kv_cache_record_is_build_record_over_what_the_steps_kept(tmp_path):
    s = _session(tmp_path)
    arch = kv_cache.read_architecture(s)
    plan = kv_cache.plan_for(s, s.profile, arch)
    kv_claims = kv_cache.seed_kv_claims(s)
    skip = "not run in this test"
    s.results.update(llama_cpp_grid=[], llama_cpp_skipped=skip, vllm_check={"skipped": "engine llama.cpp", "rows": []})
    kv_cache.record(s)
    written = s.read(kv_cache.NAME)
    expected = kv_cache.build_record(
        arch=arch, plan=plan, grid_rows=[], skip_reason=skip, parity=kv_cache.parity_checks([], skip),
        vllm_result=s.results["vllm_check"], vllm_parity=kv_cache.vllm_checks(s.results["vllm_check"]),
        kv_claims=kv_claims, target=[], target_max=[], plan_vs_server=[], served=None,
        stack_fig=kv_cache.memory_stack_chart(arch, plan), target_fig=None, parity_fig=None)
    assert written["summary"] == expected["summary"] and written["checks"] == expected["checks"]
    assert [c["title"] for c in written["charts"]] == [c["title"] for c in expected["charts"]]
