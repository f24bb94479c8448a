"""Troubleshooting: the knowledge base of failures, their reproductions, diagnosing an endpoint, and what fills
the lab's cache (`lab cache`)."""
