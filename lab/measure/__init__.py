"""Measurements: hardware (inventory, copy bandwidth, checks, PSU sizing), GPU monitoring and links, install checks, benchmarks, parity checks, tuning, multi-GPU."""
