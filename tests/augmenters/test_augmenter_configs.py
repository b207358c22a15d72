"""Every public augmenter, layer and loss rebuilds from its configuration with its settings.

The table must name every public class of the three modules (a new class without
an entry fails `test_the_table_covers_every_public_class`), each built with
settings other than its defaults so that a forgotten argument is caught.
"""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import augmenters, layers, losses
from tensorflow_similarity.testing import assert_config_round_trip

IMAGES = np.random.default_rng(0).uniform(0, 255, size=(2, 10, 10, 3)).astype("float32")


@keras.saving.register_keras_serializable(package="SimilarityTests")
def _flip(image):
    return tf.image.flip_left_right(image)


# name -> (a factory with non-default settings, call arguments or None)
AUGMENTERS = {
    "BarlowAugmenter": (
        lambda: augmenters.BarlowAugmenter(8, 6, flip_probability=0.25, blur_max_sigma=2, seed=3),
        (IMAGES / 255.0,),
    ),
    "ContrastiveAugmenter": (lambda: augmenters.ContrastiveAugmenter(_flip, num_cpu=2), (IMAGES,)),
    "GlyphAugmenter": (lambda: augmenters.GlyphAugmenter(image_size=8, rotation=0.1, seed=4), None),
    "MultiCropAugmenter": (
        lambda: augmenters.MultiCropAugmenter(global_size=8, local_size=4, n_local=2, seed=5),
        None,
    ),
    "SimCLRAugmenter": (
        lambda: augmenters.SimCLRAugmenter(8, 6, jitter_stength=0.5, flip=False, seed=6),
        (IMAGES,),
    ),
    "ViewAugmenter": (
        lambda: augmenters.ViewAugmenter(image_size=8, crop_scale=(0.5, 1.0), seed=7),
        None,
    ),
}
LAYERS = {
    "ActivationStdLoggingLayer": lambda: layers.ActivationStdLoggingLayer("std"),
    "CosineClassifier": lambda: layers.CosineClassifier(3, kernel_initializer="zeros"),
    "GeneralizedMeanPooling1D": lambda: layers.GeneralizedMeanPooling1D(p=2.0, keepdims=True),
    "GeneralizedMeanPooling2D": lambda: layers.GeneralizedMeanPooling2D(p=2.0, keepdims=True),
    "MetricEmbedding": lambda: layers.MetricEmbedding(3),
    "SyncBatchNormalization": lambda: layers.SyncBatchNormalization(momentum=0.5, epsilon=0.01),
}
LOSSES = {
    "ArcFaceLoss": lambda: losses.ArcFaceLoss(margin=0.3, scale=16.0),
    "BYOLLoss": lambda: losses.BYOLLoss(name="byol"),
    "BarlowTwinsLoss": lambda: losses.BarlowTwinsLoss(lambda_=0.01, margin=0.1),
    "CircleLoss": lambda: losses.CircleLoss(gamma=10.0, margin=0.2),
    "DINOLoss": lambda: losses.DINOLoss(student_temperature=0.2),
    "MoCoV2Loss": lambda: losses.MoCoV2Loss(temperature=0.3),
    "MoCoV3Loss": lambda: losses.MoCoV3Loss(temperature=0.3),
    "MultiNegativesRankLoss": lambda: losses.MultiNegativesRankLoss(scale=10.0),
    "MultiSimilarityLoss": lambda: losses.MultiSimilarityLoss(alpha=3.0, beta=20.0),
    "PNLoss": lambda: losses.PNLoss(margin=0.2, negative_mining_strategy="hard"),
    "ProxyAnchorLoss": lambda: losses.ProxyAnchorLoss(3, 4, margin=0.2, alpha=16.0),
    "ProxyNCALoss": lambda: losses.ProxyNCALoss(3, 4, temperature=0.2),
    "SimCLRLoss": lambda: losses.SimCLRLoss(temperature=0.2),
    "SimSiamLoss": lambda: losses.SimSiamLoss(margin=0.1),
    "SoftNearestNeighborLoss": lambda: losses.SoftNearestNeighborLoss(temperature=2.0),
    "SupConLoss": lambda: losses.SupConLoss(temperature=0.1),
    "SwAVLoss": lambda: losses.SwAVLoss(temperature=0.2, sinkhorn_iterations=4),
    "TripletLoss": lambda: losses.TripletLoss(margin=0.3, positive_mining_strategy="easy"),
    "VICRegLoss": lambda: losses.VICRegLoss(lambda_=20.0, nu=2.0),
    "XBM": lambda: losses.XBM(losses.MultiSimilarityLoss(alpha=3.0), memory_size=8),
}
# Bases and aliases: nothing to build, or the same class under another name.
NOT_BUILT = {
    "Augmenter",  # abstract: augment() is the subclass's
    "GeneralizedMeanPooling",  # the base of the 1D and 2D poolings
    "GlobalBatchLoss",  # the contract's base class
    "MetricLoss",  # the base of the metric losses
    "ProxyLoss",  # the base of the proxy losses
    "Barlow",  # 0.17's alias of BarlowTwinsLoss
    "VicReg",  # 0.17's alias of VICRegLoss
}


def test_the_table_covers_every_public_class():
    public = {
        name
        for module in (augmenters, layers, losses)
        for name in module.__all__
        if inspect.isclass(getattr(module, name))
    }
    assert public - NOT_BUILT == set(AUGMENTERS) | set(LAYERS) | set(LOSSES)


@pytest.mark.parametrize("name", sorted(AUGMENTERS))
def test_each_augmenter_round_trips(name):
    make, call = AUGMENTERS[name]
    assert_config_round_trip(make(), *(call or ()))


@pytest.mark.parametrize("name", sorted(LAYERS) + sorted(LOSSES))
def test_each_layer_and_loss_round_trips(name):
    assert_config_round_trip({**LAYERS, **LOSSES}[name]())


def test_an_augmenter_of_an_unregistered_function_says_so_when_rebuilt():
    augmenter = augmenters.ContrastiveAugmenter(lambda image: image)
    with pytest.raises(Exception, match="lambda|function|safe_mode"):
        augmenters.ContrastiveAugmenter.from_config(augmenter.get_config())
