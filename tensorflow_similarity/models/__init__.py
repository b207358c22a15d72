"""Models of tensorflow-similarity."""

from tensorflow_similarity.models.contrastive_model import ContrastiveModel
from tensorflow_similarity.models.heads import (
    build_predictor,
    build_projector,
    create_contrastive_model,
    get_predictor,
    get_projector,
    projector_widths,
)

__all__ = [
    "ContrastiveModel",
    "build_predictor",
    "build_projector",
    "create_contrastive_model",
    "get_predictor",
    "get_projector",
    "projector_widths",
]
