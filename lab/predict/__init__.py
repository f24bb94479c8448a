"""Predictions before anything runs: KV cache, memory plan, roofline, compatibility, the claims ledger and the plan."""
