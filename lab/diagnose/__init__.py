"""Troubleshooting: the knowledge base of failures, their reproductions, and diagnosing an endpoint."""
