"""Plots for notebooks: neighbour images, confusion matrix, 2-D projection, augmented views.

Needs matplotlib (`pip install tensorflow-similarity[viz]`); the UMAP
projection also needs `umap-learn`. The package does not import this module
itself, so neither is a dependency of the rest.
"""

from tensorflow_similarity.visualization.confusion_matrix import confusion_matrix
from tensorflow_similarity.visualization.neighbors import viz_neigbors_imgs, viz_neighbors_imgs
from tensorflow_similarity.visualization.projection import project_embeddings, projector
from tensorflow_similarity.visualization.views import visualize_views

__all__ = [
    "confusion_matrix",
    "project_embeddings",
    "projector",
    "viz_neighbors_imgs",
    "viz_neigbors_imgs",
    "visualize_views",
]
