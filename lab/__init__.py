"""The budget-GPU LLM lab: profile → plan → notebooks → records → report.

Nothing happens at import time; each module does one job (see README.md).
"""
__version__ = "0.1.0"
