"""0.17 path: re-exports `confusion_matrix`.

Defined in `tensorflow_similarity.visualization.confusion_matrix`.
"""

from tensorflow_similarity.visualization.confusion_matrix import confusion_matrix

__all__ = ["confusion_matrix"]
