"""0.17 path: re-exports `viz_neigbors_imgs`, `viz_neighbors_imgs`.

0.17's spelling and the corrected one, defined in
`tensorflow_similarity.visualization.neighbors`.
"""

from tensorflow_similarity.visualization.neighbors import viz_neigbors_imgs, viz_neighbors_imgs

__all__ = ["viz_neigbors_imgs", "viz_neighbors_imgs"]
