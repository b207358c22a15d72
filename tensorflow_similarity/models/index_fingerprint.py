"""The old path of the index fingerprint, kept importable: see `models/index/fingerprint.py`."""

from tensorflow_similarity.models.index.fingerprint import (
    StaleIndexError,
    StaleIndexWarning,
    weights_sample_key,
    weights_sha256,
)

__all__ = ["StaleIndexError", "StaleIndexWarning", "weights_sample_key", "weights_sha256"]
