"""0.17's module path of `viz_neigbors_imgs` (0.17's spelling; `viz_neighbors_imgs` too)."""

from tensorflow_similarity.visualization.neighbors import viz_neigbors_imgs, viz_neighbors_imgs

__all__ = ["viz_neigbors_imgs", "viz_neighbors_imgs"]
