"""The wire clock (lab.measure.wire_clock) between the lab's client and the real llama-server (the embedded SmolLM2,
one thread): every request is seen, and each one's TTFT on the wire is inside the client's — the wire sees the
request after the client sent it and the first text before the client reads it, on the same clock (one process), so
this holds by causality on any machine, however loaded."""
import pytest

from lab.core import profiles
from lab.experiments import peer_clients
from lab.measure import wire_clock
from lab.measure.peer_bench import PeerLoad, run_lab_client
from lab.serving import engines, serve

pytestmark = pytest.mark.tools
LOAD = PeerLoad(num_prompts=6, concurrency=2, input_tokens=64, output_tokens=8)


def test_the_lab_client_through_the_wire_on_a_real_server(smol_model, tmp_path):
    prof = profiles.load("cpu-default").model_copy(update={"threads": 1})
    cmd = engines.build_command(prof, port=serve.free_port(), model_path=smol_model)
    with serve.start(cmd, log_dir=tmp_path, name="wire") as srv, wire_clock.Wire("127.0.0.1", cmd.port) as wire:
        start = wire.mark()
        run = run_lab_client(peer_clients.Via(srv, wire), LOAD)
        figs = wire.run_figures(start, LOAD.num_prompts)
    client = sorted(r.ttft_s * 1000 for r in run.results if r.success)
    print("client TTFT ms:", [round(x, 1) for x in client], "wire TTFT ms:", sorted(figs["ttft_samples_ms"]))
    assert len(client) == LOAD.num_prompts and figs["requests"] == LOAD.num_prompts
    # sorted pairwise: the k-th fastest on the wire is no slower than the k-th fastest at the client
    assert all(w <= c + 0.1 for w, c in zip(sorted(figs["ttft_samples_ms"]), client))  # 0.1: the samples' rounding
    assert all(r["done_s"] is not None for r in wire.since(start) if r["first_text_s"] is not None)
