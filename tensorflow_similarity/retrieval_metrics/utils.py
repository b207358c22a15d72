"""0.17's module path of `compute_match_mask`, now in `retrieval_metrics.retrieval_metric`."""

from tensorflow_similarity.retrieval_metrics.retrieval_metric import compute_match_mask

__all__ = ["compute_match_mask"]
