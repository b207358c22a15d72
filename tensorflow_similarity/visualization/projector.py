"""0.17 path: re-exports `projector`, `tensor2images`.

Defined in `tensorflow_similarity.visualization.projection`.
"""

from tensorflow_similarity.visualization.projection import projector, tensor2images

__all__ = ["projector", "tensor2images"]
