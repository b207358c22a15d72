"""0.17's module path of `make_classification_metric`, now in `classification_metrics.registry`."""

from tensorflow_similarity.classification_metrics.registry import make_classification_metric

__all__ = ["make_classification_metric"]
