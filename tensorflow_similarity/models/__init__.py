"""Models of tensorflow-similarity."""

from tensorflow_similarity.models.contrastive import ContrastiveModel
from tensorflow_similarity.models.dino_head import WeightNormalizedDense, build_dino_head
from tensorflow_similarity.models.factory import create_contrastive_model
from tensorflow_similarity.models.heads import (
    build_predictor,
    build_projector,
    get_predictor,
    get_projector,
    projector_widths,
)
from tensorflow_similarity.models.index import IndexMixin, StaleIndexError, StaleIndexWarning
from tensorflow_similarity.models.similarity_model import SimilarityModel

__all__ = [
    "ContrastiveModel",
    "IndexMixin",
    "SimilarityModel",
    "StaleIndexError",
    "StaleIndexWarning",
    "WeightNormalizedDense",
    "build_dino_head",
    "build_predictor",
    "build_projector",
    "create_contrastive_model",
    "get_predictor",
    "get_projector",
    "projector_widths",
]
