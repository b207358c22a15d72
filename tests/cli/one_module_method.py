"""A self-supervised method added outside the package, in one module: a class, registered.

SimCLR with a colder temperature and SimSiam's views without the flip. Importing
this module registers it; `tests/cli/test_one_module_method.py` shows that
`create_contrastive_model`, `tfsim pretrain --algorithm tiny_simclr` and the docs'
table of methods then take it, with nothing else written anywhere.
"""

from __future__ import annotations

import keras

from tensorflow_similarity import augmenters, losses
from tensorflow_similarity.models.algorithms import SimCLR, register_algorithm


@register_algorithm
class TinySimCLR(SimCLR):
    """SimCLR at temperature 0.2, on SimSiam's views without the flip."""

    name = "tiny_simclr"
    title = "Tiny SimCLR"
    paper = "the tests' own"
    prevents_collapse = "every other image of the batch is a negative, at temperature 0.2"
    across_replicas = "negatives gathered from all replicas"

    def default_loss(self) -> keras.losses.Loss:
        return losses.SimCLRLoss(temperature=0.2)

    def photograph_views(
        self, image_size: int, seed: int | None = None
    ) -> augmenters.ViewAugmenter:
        return augmenters.simsiam_augmenter(image_size, seed=seed, flip_prob=0.0)
