"""tensorflow_similarity.architectures."""
