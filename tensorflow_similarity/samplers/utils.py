"""0.17 path: re-exports `select_examples`.

Defined in `tensorflow_similarity.samplers.select_examples`.
"""

from tensorflow_similarity.samplers.select_examples import select_examples

__all__ = ["select_examples"]
