"""A fast local streaming source for measuring the benchmark client itself (not a model server).

It answers `POST /i<ms>/v1/completions` (and `/i<ms>/v1/chat/completions`) with an OpenAI-style SSE
stream of `max_tokens` one-word chunks, a final chunk with `usage`, and `data: [DONE]` — the shape
llama-server sends. `<ms>` paces the chunks: 0 writes them as fast as the socket takes them, 20 sends
one every 20 ms (scheduled from the request's arrival, so the source does not drift). The last chunk's
`timings.send_gaps_ms` lists the gaps between the source's own sends, so the client's ITL can be
compared chunk by chunk with what was sent (the difference is what the client adds). Raw asyncio
sockets keep the source cheap; it runs in its own process (`running()`) so it does not steal the
client's core:

    python -m lab.measure.bench_source --port 0     # prints "listening on http://127.0.0.1:PORT"
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time

from lab.core import processes

_PATH = re.compile(rb"^POST /i([0-9.]+)/v1/(chat/)?completions ")


def _chunk(text: str) -> bytes:
    body = {"choices": [{"text": text, "index": 0, "finish_reason": None}], "object": "text_completion",
            "model": "source"}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        m = _PATH.match(head)
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        body = json.loads(await reader.readexactly(int(length.group(1)))) if length else {}
        if not m:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        interval = float(m.group(1)) / 1000
        tokens = int(body.get("max_tokens", 16))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Connection: close\r\n\r\n")
        t0 = time.perf_counter()
        sent = []
        for k in range(tokens):
            if interval:
                delay = t0 + (k + 1) * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            writer.write(_chunk(" tok"))
            await writer.drain()
            sent.append(time.perf_counter())
        usage = {"prompt_tokens": len(str(body.get("prompt", "")).split()), "completion_tokens": tokens,
                 "total_tokens": tokens, "prompt_tokens_details": {"cached_tokens": 0}}
        # the source's own gaps between chunk sends: the client's ITL minus these is what the client adds
        gaps = [round((b - a) * 1000, 4) for a, b in zip(sent, sent[1:])]
        final = {"choices": [{"text": "", "index": 0, "finish_reason": "length"}], "usage": usage,
                 "timings": {"predicted_n": tokens, "send_gaps_ms": gaps}}
        writer.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    server = await asyncio.start_server(_handle, host, port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def running(timeout_s: float = 10.0):
    """Start the source in its own process; yield its base URL; stop it (SIGTERM, then SIGKILL)."""
    proc = subprocess.Popen([sys.executable, "-m", "lab.measure.bench_source", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("listening on ") or proc.poll() is not None:
                break
        if not line.startswith("listening on "):
            raise RuntimeError(f"lab.measure.bench_source did not start: {line or 'no output'}")
        yield line.split("listening on ", 1)[1].strip()
    finally:
        processes.stop(proc, grace_s=5)
        proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
