"""A free TCP port for a server the lab starts (llama-server, vLLM, JupyterLab, a torch.distributed rendezvous).

Kept apart from lab.serving.serve so scripts that travel alone (lab.experiments.allreduce_bench on a GPU box) use the same
pick without importing an HTTP client."""
from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    """The first port of the OS's ephemeral range (Linux default 32768)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, chosen below the OS's ephemeral range. Every bind(0) on the machine (a
    Jupyter kernel's five ZMQ ports, a client's source port) draws from that range, so a port the OS picked and the
    lab uses later (a profile that names it, a server started after the next kernel) can be taken meanwhile: CI
    (2026-12-05) saw a kernel's ZMQ socket on the port a test's profile had picked for llama-server. Below the
    range only a program that names the port can take it. Falls back to the OS's pick when the range starts low."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = _ephemeral_low()
    if low > 12_000:
        pick = random.SystemRandom()  # not seeded on purpose: two processes must not try the same ports
        for port in (pick.randrange(low - 10_000, low) for _ in range(64)):
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
