"""0.17 path: re-exports `visualize_views`.

0.17's spelling of the module; defined in `tensorflow_similarity.visualization.views`.
"""

from tensorflow_similarity.visualization.views import visualize_views

__all__ = ["visualize_views"]
