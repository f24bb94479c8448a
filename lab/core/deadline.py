"""Overall deadlines for every network wait: one answer for the health wait, discovery, the smoke test, the load
generator's requests and each benchmark level.

A per-read timeout (httpx's `timeout=`) is reset by every byte that arrives: a server that trickles one byte a
second, or streams tokens and never sends [DONE], holds a read-timeout-only client for ever; a frozen (SIGSTOPped)
one holds it for the whole read timeout of every request. A `Deadline` is a point in time fixed when the wait
starts, that nothing the server does moves:

    limit = Deadline(30, "discovery")
    reply = get(client, "GET", url, limit)      # each read ≤ what is left; the body is read under the deadline
    limit.remaining()                           # seconds left (0 when over)

Sync requests (`get`) stream the body and check the deadline between chunks, with every socket operation's own
timeout capped at what is left, and a watchdog shuts the socket down at the deadline (for a status line or headers
trickled byte by byte, which httpcore reads where no check can run). Async code (the load
generator) wraps a whole request in `asyncio.timeout(limit.remaining())`, which nothing the server sends resets.
`DeadlineExceeded` is an httpx.TimeoutException, so the callers' `except httpx.HTTPError` handles it as the
timeout it is.

Every read is capped in bytes too (a gzip bomb, a `Content-Length: 10^13`, an endless `data:` line reached MemoryError
in seconds): `get` reads at most `max_bytes` (MAX_REPLY_BYTES) as sent and as decoded, `lines` (the load generator's
streams) at most MAX_LINE_BYTES a line; more is `ReplyTooLarge`, an httpx.RemoteProtocolError, handled as the broken
reply it is.

"""
from __future__ import annotations

import math
import re
import socket
import threading
import time

import httpx

# A socket operation (connect, one read) never waits longer than this even when the deadline is further away:
# an answer that takes longer between two bytes is not coming (every reply the lab asks for starts within seconds).
PER_READ_S = 10.0


class DeadlineExceeded(httpx.TimeoutException):
    """A wait ran past its overall deadline (the message says which wait and how long it had)."""


# The most one reply may hold, as sent and as decoded: the longest the lab asks for is /v1/models or /metrics of a
# big server (10^5 model ids: ~10 MB); a reply past it is not one the lab can use.
MAX_REPLY_BYTES = 32 << 20
MAX_LINE_BYTES = 1 << 20  # one line of a streamed reply: a chunk of a few tokens is ~300 bytes
# Content encodings httpx decodes one network read of (at most 64 KiB) into a bounded output: gzip at most ~1,000×.
# Stacked encodings ("gzip, gzip": ~10^6×) and the others (brotli, zstd when installed: far more) are refused.
BOUNDED_ENCODINGS = ("", "identity", "gzip", "x-gzip", "deflate")


class ReplyTooLarge(httpx.RemoteProtocolError):
    """A reply larger than the lab reads (or encoded so that its size cannot be bounded while reading)."""


def check_reply_size(reply: httpx.Response, max_bytes: int = MAX_REPLY_BYTES, body_bytes: int = 0) -> None:
    """Raise ReplyTooLarge when `reply` (headers read; `body_bytes` decoded so far) is past `max_bytes`, as sent
    (num_bytes_downloaded), as decoded, or as announced (Content-Length), or uses an encoding whose decoding is not
    bounded (BOUNDED_ENCODINGS). Called before the body and after every chunk of it."""
    encoding = reply.headers.get("content-encoding", "").strip().lower()
    length = reply.headers.get("content-length", "")
    too_big = max(reply.num_bytes_downloaded, body_bytes, int(length) if length.strip().isdigit() else 0) > max_bytes
    if too_big or encoding not in BOUNDED_ENCODINGS:
        why = f"Content-Encoding {encoding!r} is not read" if not too_big else f"more than {max_bytes:,} bytes"
        exc = ReplyTooLarge(f"reply of {reply.request.method} {reply.request.url.path}: {why}; not read further",
                            request=reply.request)
        exc.status_code = reply.status_code  # the server did answer: callers may say with what status
        raise exc


class Deadline:
    """A fixed end time (time.monotonic) for a wait named `what`; None seconds: no limit."""

    def __init__(self, seconds: float | None, what: str):
        self.seconds = seconds
        self.what = what
        self.started = time.monotonic()
        self.end = math.inf if seconds is None else self.started + max(0.0, float(seconds))

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def sooner(self, seconds: float | None, what: str | None = None) -> "Deadline":
        """A deadline `seconds` from now, or this one's end when that comes first (a part of a bounded whole)."""
        part = Deadline(seconds, what or self.what)
        if self.end < part.end:
            part.end, part.seconds, part.what = self.end, self.seconds, self.what
        return part

    def timeout(self, per_read_s: float = PER_READ_S) -> httpx.Timeout:
        """httpx timeouts for one request under this deadline: no socket operation waits past its end."""
        return httpx.Timeout(max(0.001, min(per_read_s, self.remaining())))

    def message(self) -> str:
        return (f"{self.what}: no complete answer within its overall deadline of {self.seconds:g} s "
                "(bytes that trickle in do not extend it)")

    def exceeded(self, request: httpx.Request | None = None) -> DeadlineExceeded:
        return DeadlineExceeded(self.message(), request=request)

    def __repr__(self) -> str:
        return f"Deadline({self.what!r}, {self.seconds}s, {self.remaining():.1f}s left)"


def get(client: httpx.Client, method: str, url: str, limit: Deadline, json_body: dict | None = None,
        per_read_s: float = PER_READ_S, max_bytes: int = MAX_REPLY_BYTES) -> httpx.Response:
    """One request, its whole reply read before `limit` ends; raises DeadlineExceeded (an httpx.TimeoutException)
    when it does not, ReplyTooLarge past `max_bytes` (`check_reply_size`), and httpx's errors as httpx does. The
    response is complete (`.json()`, `.text` work).

    The body is read chunk by chunk with the deadline checked between chunks. The status line and headers are read
    inside httpcore, where a server trickling them byte by byte would reset each read's timeout: a watchdog shuts the
    request's socket down at the deadline (each request gets its own connection, `Connection: close`, so the socket
    is the one the trace names), which ends any read in progress."""
    if limit.expired:
        raise limit.exceeded()
    opened: dict = {}

    def trace(event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            opened["socket"] = info["return_value"].get_extra_info("socket")

    watchdog = threading.Timer(limit.remaining(), _shut, (opened,))
    watchdog.daemon = True
    watchdog.start()
    try:
        with client.stream(method, url, json=json_body, timeout=limit.timeout(per_read_s),
                           headers={"Connection": "close"}, extensions={"trace": trace}) as reply:
            body = bytearray()
            check_reply_size(reply, max_bytes)
            for chunk in reply.iter_bytes():  # decoded: the new Response below holds the body as it was meant
                body += chunk
                check_reply_size(reply, max_bytes, len(body))
                if limit.expired:
                    raise limit.exceeded(reply.request)
            if opened.get("shut"):  # the watchdog's shutdown reads as a body that ended: it did not
                raise limit.exceeded(reply.request)
            headers = [(k, v) for k, v in reply.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length")]
            return httpx.Response(reply.status_code, headers=headers, content=bytes(body), request=reply.request)
    except httpx.TransportError as exc:
        if limit.expired and not isinstance(exc, DeadlineExceeded):  # the watchdog ended it (or it ended as it fired)
            raise limit.exceeded() from None
        raise
    finally:
        watchdog.cancel()


def _shut(opened: dict) -> None:
    opened["shut"] = True
    sock = opened.get("socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed: the request ended on its own
            pass


async def read_capped(reply: httpx.Response, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """A streamed (async) reply's whole body, at most `max_bytes` (`check_reply_size`)."""
    check_reply_size(reply, max_bytes)
    body = bytearray()
    async for chunk in reply.aiter_bytes():
        body += chunk
        check_reply_size(reply, max_bytes, len(body))
    return bytes(body)


_LINE_END = re.compile(rb"\r\n|\r|\n")


async def lines(reply: httpx.Response, max_line: int = MAX_LINE_BYTES):
    """The lines of a streamed (async) reply, as text (httpx's aiter_lines keeps an unended line whole, however long:
    an endless `data:` line grew until MemoryError); a line longer than `max_line` bytes raises ReplyTooLarge."""
    check_reply_size(reply, max_bytes=1 << 62)  # the encoding only: a stream's length is bounded by its deadline
    pending = bytearray()
    async for chunk in reply.aiter_bytes():
        start = 0
        for end in _LINE_END.finditer(chunk):  # only the new bytes are searched: a trickled line costs no rescans
            pending += chunk[start:end.start()]
            yield pending.decode("utf-8", errors="replace")
            pending, start = bytearray(), end.end()
        pending += chunk[start:]
        if len(pending) > max_line:
            raise ReplyTooLarge(f"a line of the streamed reply of {reply.request.url.path} is longer than {max_line:,} "
                                "bytes; not read further", request=reply.request)
    if pending:
        yield pending.decode("utf-8", errors="replace")
