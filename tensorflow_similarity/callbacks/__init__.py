"""tensorflow_similarity.callbacks."""
