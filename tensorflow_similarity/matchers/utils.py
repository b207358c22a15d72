"""0.17's module path of `make_classification_matcher`, now in `matchers.registry`."""

from tensorflow_similarity.matchers.registry import make_classification_matcher

__all__ = ["make_classification_matcher"]
