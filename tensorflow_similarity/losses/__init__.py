"""tensorflow_similarity.losses."""
