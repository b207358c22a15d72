"""0.17's module path of `select_examples`."""

from tensorflow_similarity.samplers.select_examples import select_examples

__all__ = ["select_examples"]
