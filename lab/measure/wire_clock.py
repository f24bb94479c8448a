"""The wire's clock: a pass-through proxy between a client and the server that notes when each request crossed it.

The server's log (lab.measure.server_clock) times what llama-server did — a slot's wait, its prompt, its decode —
but not when its first token left it, and two clients run back to back never time the same requests. A proxy on
127.0.0.1 that both clients talk through sees every request of both runs on one clock, between the two:

    sent        the request's first byte reached the proxy (the client had sent it)
    first text  the first streamed chunk carrying generated text came from the server (what every client's TTFT
                waits for: `"text":"…"` on /v1/completions, `"content":"…"` or `"reasoning_content":"…"` on chat;
                a role-only first chunk or an empty string is not text)
    done        `data: [DONE]` came from the server

so TTFT and request latency *on the wire* exclude what each client adds on its side (its send, its parsing). When
lab ÷ theirs for TTFT is the wire's TTFT during the lab's run ÷ during theirs (within the tolerance), the server
delivered the first tokens later in one run than in the other — its scheduling, not the clients' definitions —
and, unlike the log's per-run means, the wire keeps each request, so medians compare too.

    with Wire("127.0.0.1", 8080) as wire:      # a proxy on a free port; wire.base_url for the clients
        m = wire.mark(); ...client run...; figures(wire.since(m))

What it costs: one Python thread relaying bytes (asyncio), a few hundred 100-byte chunks a second at 16 streams.
Plain HTTP/1.1 without pipelining (what llama-server and the clients speak); a pattern cut by a read boundary is
found in the next read (the last bytes of each read are kept), so a first text is at most one chunk late.
"""
from __future__ import annotations

import asyncio
import re
import threading
import time
from statistics import mean, median

TEXT = re.compile(rb'"(?:text|content|reasoning_content)"\s*:\s*"(?!")')  # compact (llama-server) or spaced JSON
DONE = b"data: [DONE]"
REQUEST_LINE = re.compile(rb"^(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) (\S+) HTTP/1\.[01]\r\n")
TAIL = 64  # bytes of the previous read searched again with the next (a pattern split between two reads)
# The wire's figures and the clients' names for them (lab.measure.metrics.summarise): TTFT and request latency.
KEYS = ("ttft_ms", "e2el_ms")
# How every reason this module gives starts (peer_verdicts tells these apart from the server log's and definitions).
SAYS = "the wire's clock accounts for it"


class Wire:
    """A proxy from a free port on 127.0.0.1 to (host, port), in a thread of its own; `requests` in arrival order."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.requests: list[dict] = []
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Wire":
        ready, failed = threading.Event(), []

        def serve():
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                server = loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
            except OSError as exc:  # no port to listen on: said by start(), not lost in the thread
                failed.append(exc)
                ready.set()
                return
            self.port, self._loop = server.sockets[0].getsockname()[1], loop
            ready.set()
            loop.run_forever()
            server.close()
            loop.run_until_complete(server.wait_closed())
            # relays still open (a client that kept its connection) end here, while the loop runs: left to the
            # garbage collector, their `finally` closed sockets on a closed loop ("Event loop is closed", a pytest
            # warning in a fresh clone, 2026-12-05)
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=serve, name="wire-clock", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failed or self.port is None:
            raise RuntimeError(f"the wire clock's proxy could not listen on 127.0.0.1: {failed[0] if failed else 'timeout'}")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> "Wire":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def mark(self) -> int:
        """How many requests the wire has seen so far (`since` takes the ones after)."""
        return len(self.requests)

    def since(self, start: int) -> list[dict]:
        """The requests that came after `mark()` returned `start`."""
        return list(self.requests[start:])

    def run_figures(self, start: int, requests: int) -> dict | None:
        """`figures` of a run's last `requests` streamed requests after `start` (its warm-ups come first); None when
        fewer came."""
        streamed = [r for r in self.since(start) if r["first_text_s"] is not None]
        return figures(streamed[-requests:]) if len(streamed) >= requests > 0 else None

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()  # the client sees the connection close, as it would without the proxy
            return
        state: dict = {"req": None, "tail": b""}

        async def client_to_server():
            while data := await reader.read(65536):
                line = REQUEST_LINE.match(data)
                if line:  # a new request on this connection (HTTP/1.1: the previous response has ended)
                    state["req"] = {"path": line.group(1).decode(errors="replace"), "sent_s": time.perf_counter(),
                                    "first_text_s": None, "done_s": None}
                    state["tail"] = b""
                    self.requests.append(state["req"])
                up_writer.write(data)
                await up_writer.drain()
            if up_writer.can_write_eof():
                up_writer.write_eof()

        async def server_to_client():
            while data := await up_reader.read(65536):
                now, req = time.perf_counter(), state["req"]
                if req is not None and req["done_s"] is None:
                    seen = state["tail"] + data
                    if req["first_text_s"] is None and TEXT.search(seen):
                        req["first_text_s"] = now
                    if DONE in seen:
                        req["done_s"] = now
                    state["tail"] = seen[-TAIL:]
                writer.write(data)
                await writer.drain()
            writer.close()

        try:  # a side that resets ends the relay; the other is closed below
            await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                w.close()


def figures(requests: list[dict]) -> dict | None:
    """One run on the wire's clock: the streamed requests (a first text seen), TTFT and request latency (to [DONE])
    in ms, mean and median, and each request's TTFT (the raw samples)."""
    done = [r for r in requests if r["first_text_s"] is not None]
    if not done:
        return None
    ttft = [(r["first_text_s"] - r["sent_s"]) * 1000 for r in done]
    e2el = [(r["done_s"] - r["sent_s"]) * 1000 for r in done if r["done_s"] is not None]
    return {"requests": len(done),
            "ttft_ms": {"mean": mean(ttft), "p50": median(ttft)},
            "e2el_ms": {"mean": mean(e2el), "p50": median(e2el)} if e2el else None,
            "ttft_samples_ms": [round(x, 1) for x in ttft]}


def wire_ratio(key: str, sub: str | None, lab: dict | None, theirs: dict | None) -> float | None:
    """The wire's figure (`key` `sub`, e.g. ttft_ms p50) during the lab's run ÷ during theirs; None when unknown."""
    if key not in KEYS or not sub:
        return None
    a, b = ((lab or {}).get(key) or {}).get(sub), ((theirs or {}).get(key) or {}).get(sub)
    return a / b if a and b else None


def explain(key: str, sub: str | None, ratio: float | None, lab: dict | None, theirs: dict | None,
            tolerance: float) -> str | None:
    """Why lab ÷ theirs (`ratio`) left 1 ± tolerance when the wire's clock accounts for it: the text, or None."""
    w = wire_ratio(key, sub, lab, theirs)
    if ratio is None or w is None or abs(ratio / w - 1) > tolerance:
        return None
    return (f"{SAYS}: {key} {sub} {lab[key][sub]:.4g} ms on the wire during the lab's run, {theirs[key][sub]:.4g} ms "
            f"during theirs (× {w:.3f}); lab ÷ theirs ÷ that = {ratio / w:.3f}")
