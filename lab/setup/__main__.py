"""`python3 -m lab.setup`: the base set-up (lab/setup/__init__.py), then an engine's own venv when asked
(--engine vllm or LAB_VLLM=1: lab/setup/vllm.py). Standard library only, like the rest of the package."""
import sys
import time

from lab import setup
from lab.setup import vllm


def run(argv: list[str] | None = None) -> int:
    args = setup.arg_parser().parse_args(argv)
    t0 = time.monotonic()
    cache = setup.main(args)
    if args.engine == "vllm":  # opt-in: ~3 GB of wheels the first time, so never part of plain `make setup`
        vllm.run(cache, args.profile)
    print(f"[setup] all set in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run())
