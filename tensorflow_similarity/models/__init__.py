"""tensorflow_similarity.models."""
