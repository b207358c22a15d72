"""0.17 path: re-exports `make_classification_metric`.

Defined in `tensorflow_similarity.classification_metrics.registry`.
"""

from tensorflow_similarity.classification_metrics.registry import make_classification_metric

__all__ = ["make_classification_metric"]
