"""Runs and their records: the manifest, the answer, the report and its browser check, and the notebook runner."""
