"""0.17's module path of `confusion_matrix`."""

from tensorflow_similarity.visualization.confusion_matrix import confusion_matrix

__all__ = ["confusion_matrix"]
