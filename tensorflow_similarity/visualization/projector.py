"""0.17's module path of `projector` and `tensor2images`."""

from tensorflow_similarity.visualization.projection import projector, tensor2images

__all__ = ["projector", "tensor2images"]
