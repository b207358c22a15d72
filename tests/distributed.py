"""Test tooling for distribution: strategies over the logical CPUs that conftest.py creates.

`tests/conftest.py` splits the CPU into 8 logical devices before TensorFlow
starts; `mirrored_strategy(k)` (from `tensorflow_similarity.testing`) is the
one `MirroredStrategy` over the first `k` of them in this process.
Multi-process tests use `tensorflow_similarity.testing.run_local_workers`.
"""

from __future__ import annotations

from tensorflow_similarity.testing import mirrored_strategy, run_local_workers

__all__ = ["mirrored_strategy", "run_local_workers"]
