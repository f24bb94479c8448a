"""Measurements: hardware, GPU monitoring and links, install checks, benchmarks, parity checks, tuning, multi-GPU."""
