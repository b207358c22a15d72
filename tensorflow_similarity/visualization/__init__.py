"""Plots: neighbour images and grids, confusion matrix, 2-D projection, augmented views.

Needs matplotlib (`pip install tensorflow-similarity[viz]`); the UMAP
projection also needs `umap-learn`. `import tensorflow_similarity` does not
import this module: `tfsim.visualization` does on first use (0.17's
attribute), so neither is a dependency of the rest.
"""

# The module of 0.17's path `visualization.projector` is imported first, so that
# the function imported below is what the package's `projector` stays: a later
# `import tensorflow_similarity.visualization.projector` finds the module loaded
# and leaves that attribute alone.
from tensorflow_similarity.visualization import projector as _projector_module  # noqa: F401
from tensorflow_similarity.visualization.confusion_matrix import confusion_matrix
from tensorflow_similarity.visualization.neighbors import viz_neigbors_imgs, viz_neighbors_imgs
from tensorflow_similarity.visualization.neighbors_grid import plot_neighbors_grid
from tensorflow_similarity.visualization.projection import (
    project_embeddings,
    projector,
    tensor2images,
)
from tensorflow_similarity.visualization.views import visualize_views

__all__ = [
    "confusion_matrix",
    "plot_neighbors_grid",
    "project_embeddings",
    "projector",
    "tensor2images",
    "viz_neighbors_imgs",
    "viz_neigbors_imgs",
    "visualize_views",
]
