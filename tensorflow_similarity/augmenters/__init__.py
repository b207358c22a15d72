"""tensorflow_similarity.augmenters."""
