"""0.17's module of `ContrastiveModel`, `create_contrastive_model` and its head builders.

The model is in `models.contrastive`, the factory in `models.factory`, the
heads in `models.heads` and each algorithm in `models.algorithms`; this
module keeps 0.17's import path (and `ALGORITHMS`, the built-in methods'
names; `models.algorithms.algorithm_names()` lists every registered one).
"""

from __future__ import annotations

from tensorflow_similarity.models.contrastive import ContrastiveModel
from tensorflow_similarity.models.factory import create_contrastive_model
from tensorflow_similarity.models.heads import ALGORITHMS, get_predictor, get_projector

__all__ = [
    "ALGORITHMS",
    "BN_EPSILON",
    "ContrastiveModel",
    "create_contrastive_model",
    "get_predictor",
    "get_projector",
]

# 0.17's name: the batch-norm epsilon of its projector and predictor heads (ours keep
# Keras' default).
BN_EPSILON = 1.001e-5
