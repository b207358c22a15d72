"""Multi-worker test helper: the package's local cluster runner under the tests' name."""

from tensorflow_similarity.testing.local_cluster import free_ports
from tensorflow_similarity.testing.local_cluster import run_local_workers as run_workers

__all__ = ["free_ports", "run_workers"]
