"""Tooling for testing distributed code on one machine; the package never imports it."""

from tensorflow_similarity.testing.local_cluster import free_ports, run_local_workers

__all__ = ["free_ports", "run_local_workers"]
