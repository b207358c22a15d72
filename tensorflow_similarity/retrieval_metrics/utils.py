"""0.17 path: re-exports `compute_match_mask`.

Defined in `tensorflow_similarity.retrieval_metrics.retrieval_metric`.
"""

from tensorflow_similarity.retrieval_metrics.retrieval_metric import compute_match_mask

__all__ = ["compute_match_mask"]
