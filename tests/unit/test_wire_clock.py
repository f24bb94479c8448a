"""The wire clock (lab.measure.wire_clock): a proxy between client and server that times each request — through a
FAKE streaming server here (tests/fake_endpoints.py); the real llama-server and peer clients go through it in
tests/tools/test_peer_clients_tools.py — and the verdict it gives when it accounts for a TTFT ratio."""
import httpx
import pytest
from fake_endpoints import LMSTUDIO_MODEL, fake_server

from lab.experiments import peer_verdicts
from lab.measure import wire_clock

TOKEN_S = 0.05


@pytest.mark.parametrize("chunk,text", [
    (b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}', False),  # role only
    (b'data: {"choices":[{"index":0,"delta":{"content":""}}]}', False),
    (b'data: {"choices":[{"index":0,"text":""}]}', False),
    (b'data: {"choices":[{"index":0,"text":" hi"}]}', True),
    (b'data: {"choices":[{"index":0,"delta":{"content":"\\n"}}]}', True),
    (b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"x"}}]}', True),
    (b'data: {"choices": [{"index": 0, "text": " word"}]}', True),  # spaced JSON (Python's json.dumps)
])
def test_what_counts_as_the_first_text(chunk, text):
    assert bool(wire_clock.TEXT.search(chunk)) is text


def test_requests_through_the_wire_are_timed_on_its_clock():
    with fake_server("lmstudio", token_s=TOKEN_S) as base, \
            wire_clock.Wire(httpx.URL(base).host, httpx.URL(base).port) as wire:
        start = wire.mark()
        with httpx.Client(base_url=wire.base_url, timeout=10) as client:  # one keep-alive connection, 3 requests
            assert client.get("/v1/models").status_code == 200
            for n in (3, 5):
                with client.stream("POST", "/v1/completions", json={"model": LMSTUDIO_MODEL, "prompt": "a b",
                                                                    "max_tokens": n, "stream": True}) as r:
                    body = b"".join(r.iter_bytes())
                assert body.endswith(b"data: [DONE]\n\n") and body.count(b'"text": " word"') == n
        seen = wire.since(start)
    assert [r["path"] for r in seen] == ["/v1/models", "/v1/completions", "/v1/completions"]
    assert seen[0]["first_text_s"] is None  # not streamed: no text, left out of the figures
    for r, n in zip(seen[1:], (3, 5)):
        assert r["first_text_s"] - r["sent_s"] >= TOKEN_S * 0.9  # the first token comes after one token's time
        assert r["done_s"] - r["sent_s"] >= n * TOKEN_S * 0.9
    figs = wire_clock.figures(seen)
    print("wire figures:", figs)
    assert figs["requests"] == 2 and len(figs["ttft_samples_ms"]) == 2
    assert figs["ttft_ms"]["p50"] == pytest.approx(sum(figs["ttft_samples_ms"]) / 2, abs=0.2)
    assert figs["e2el_ms"]["mean"] > figs["ttft_ms"]["mean"]


def test_a_server_that_is_gone_closes_the_clients_connection():
    with wire_clock.Wire("127.0.0.1", 9) as wire:  # port 9 (discard): nothing listens on loopback
        with pytest.raises(httpx.TransportError):
            httpx.get(wire.base_url + "/health", timeout=5)
    assert wire.requests == []


def _ttft(p50: float, mean: float) -> dict:
    return {"ttft_ms": {"mean": mean, "p50": p50}}


def test_a_median_the_wire_accounts_for_gets_its_verdict():
    ours, theirs = _ttft(2493.0, 2274.0), _ttft(1466.0, 2000.0)  # guidellm at 16 streams, H200 (2026-12-02)
    wire = {"lab": {**_ttft(2400.0, 2200.0), "e2el_ms": None}, "theirs": {**_ttft(1420.0, 1950.0), "e2el_ms": None}}
    rows = {r["metric"]: r for r in peer_verdicts.compare("guidellm", ours, theirs, None, wire)}
    p50 = rows["ttft_ms p50"]
    assert p50["wire: lab run ÷ theirs"] == pytest.approx(2400 / 1420, abs=1e-3)
    assert p50["why they differ"].startswith(wire_clock.SAYS)
    assert peer_verdicts.verdict({"within ±5 %": False, "why they differ": p50["why they differ"]}) == "wire clock"
    flat = {"lab": _ttft(1500.0, 2000.0), "theirs": _ttft(1500.0, 2000.0)}  # the wire saw no difference
    rows = {r["metric"]: r for r in peer_verdicts.compare("guidellm", ours, theirs, None, flat)}
    assert rows["ttft_ms p50"]["why they differ"] is None


def test_the_h200_records_through_the_wire():
    """The two H200 runs through the wire (outputs/peer_clients-h200/20261202T1120*, 1124*): every figure agrees, is a
    definition or is accounted for (none unexplained); each client's mean TTFT is the wire's plus what the client adds
    (guidellm ≤ 3 ms, the lab ≤ 20 ms); at 16 streams the server's log shows the prompts' wait for room in a batch."""
    import json
    import lzma

    from conftest import ROOT

    from lab.measure import server_clock
    from lab.serving import engine_logs

    base = ROOT / "outputs" / "peer_clients-h200"
    for name, streams, queued in (("20261202T112014Z_fb35c7e", 16, (540, 580)), ("20261202T112402Z_fb35c7e", 8, (0, 160))):
        record = json.loads((base / name / "records" / "peer_clients.json").read_text())
        kinds = [peer_verdicts.verdict(r) for r in record["ratios"] if r["within ±5 %"] is not None]
        print(name, {k: kinds.count(k) for k in set(kinds)})
        assert "unexplained" not in kinds and kinds.count("wire clock") == 1
        for r in record["results"]:
            assert r["concurrency"] == streams
            for side, most in (("theirs", 3.0), ("lab", 20.0)):
                added = r[side]["ttft_ms"]["mean"] - r["wire_clock"][side]["ttft_ms"]["mean"]
                assert 0 <= added <= most, (name, side, added)
                assert queued[0] <= r["server_clock"][side]["queued_ms"] <= queued[1]
        # the record's server figures are the log's, read again
        log = lzma.open(base / name / "peer_clients" / "peer_clients.log.xz", "rt").read()
        runs = server_clock.runs_in_log(log)
        assert len(runs) == 2 * len(record["results"])
        first = record["results"][0]["server_clock"]["theirs"]
        assert server_clock.figures(runs[0][-first["requests"]:])["first_token_ms"] == pytest.approx(first["first_token_ms"])
        assert engine_logs.request_timings(log)[0]["queued_ms"] >= 0
