"""0.17 path: re-exports `make_classification_matcher`.

Defined in `tensorflow_similarity.matchers.registry`.
"""

from tensorflow_similarity.matchers.registry import make_classification_matcher

__all__ = ["make_classification_matcher"]
