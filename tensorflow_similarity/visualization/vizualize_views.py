"""0.17's module path (and spelling) of `visualize_views`."""

from tensorflow_similarity.visualization.views import visualize_views

__all__ = ["visualize_views"]
