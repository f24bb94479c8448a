"""`python3 -m lab.setup`: the base set-up (lab/setup/__init__.py), then an engine's own venv when asked
(--engine vllm or LAB_VLLM=1: lab/setup/vllm.py) and the peer benchmark clients' venv when asked (--peers or
LAB_PEERS=1: lab/setup/peers.py). Standard library only, like the rest of the package."""
import sys
import time

from lab import setup
from lab.setup import peers, vllm


def run(argv: list[str] | None = None) -> int:
    args = setup.arg_parser().parse_args(argv)
    t0 = time.monotonic()
    cache = setup.main(args)
    if args.engine == "vllm":  # opt-in: ~3 GB of wheels the first time, so never part of plain `make setup`
        vllm.run(cache, args.profile)
    if args.peers:  # opt-in too (~1 GB of wheels the first time); never fails set-up: offline it records why not
        peers.run(cache)
    print(f"[setup] all set in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run())
