"""The base layer: paths, profiles, facts, checks, display, evidence records, the notebook session and interrupts."""
