"""Every self-supervised method under mixed precision against float32, from the same weights.

One training step on the same batch: the loss it reports (computed before
the update) and the backbone's update must be float32's, to float16's
rounding. A step whose gradient vanishes (DINO's bottleneck rows below
float16's L2-normalisation floor) or that the loss scale skips moves
nothing, and fails.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.models import ContrastiveModel
from tests.models.contrastive_fixtures import tiny_backbone, tiny_model, views

ALGORITHMS = ("simsiam", "simclr", "barlow", "vicreg", "byol", "mocov3", "dino", "mocov2", "swav")
# A scale at which these tiny heads' first gradients fit in float16, so the first step is
# applied. Keras' default, 2**15, overflows them: it halves and skips the first steps, as
# dynamic loss scaling does, which is no fault but leaves nothing to compare.
INITIAL_SCALE = 64.0
# bfloat16 (8-bit significand) is checked on DINO only, whose head changes under it too. On
# this fixture the other methods' first losses differ from float32's by up to 18% under
# mixed_bfloat16 (SimSiam's, 0.05, is 1 - cos with cos near 1), from its rounding of the heads.
CASES = [(name, "mixed_float16") for name in ALGORITHMS] + [("dino", "mixed_bfloat16")]
# DINO clips each variable's gradient: so low a bound binds on the backbone's, and under loss
# scaling it must be scaled with the gradients, also before the optimizer's first step.
# MoCo v2's queue holds one step of the batch of 8; SwAV's prototypes are not frozen.
OPTIONS = {
    "dino": {"algorithm_options": {"clip_grad": 1e-3}},
    "mocov2": {"algorithm_options": {"queue_size": 8}},
    "swav": {"algorithm_options": {"freeze_prototypes_steps": 0}},
}


def first_step(algorithm, policy, weights=None):
    """One SGD step of the tiny model built under `policy`.

    Returns the model, its weights before the step, the step's loss and the
    backbone's update (flattened, float64).
    """
    keras.config.set_dtype_policy(policy)
    model = tiny_model(algorithm, sync_bn=False, **OPTIONS.get(algorithm, {}))
    keras.config.set_dtype_policy("float32")
    if weights is not None:
        model.set_weights(weights)
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    if policy == "mixed_float16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer, initial_scale=INITIAL_SCALE)
    model.compile(optimizer=optimizer)
    initial = model.get_weights()
    before = [w.numpy().copy() for w in model.backbone.trainable_weights]

    loss = float(model.train_step(tf.stack(views(0), axis=1))["loss"])

    after = model.backbone.trainable_weights
    update = np.concatenate([(w.numpy() - b).ravel() for b, w in zip(before, after, strict=True)])
    return model, initial, loss, update.astype("float64")


@pytest.fixture(scope="module")
def float32_steps():
    return {}


@pytest.mark.parametrize(("algorithm", "policy"), CASES)
def test_first_step_matches_float32(algorithm, policy, float32_steps):
    if algorithm not in float32_steps:
        float32_steps[algorithm] = first_step(algorithm, "float32")[1:]
    weights, expected_loss, expected_update = float32_steps[algorithm]

    model, _, loss, update = first_step(algorithm, policy, weights)

    np.testing.assert_allclose(loss, expected_loss, rtol=1e-2, atol=2e-3)
    if policy == "mixed_float16":
        assert float(model.optimizer.dynamic_scale.numpy()) == INITIAL_SCALE, "step skipped"
    error = np.linalg.norm(update - expected_update) / np.linalg.norm(expected_update)
    assert error < 0.1, f"backbone update off by {error:.3g} of float32's"


def dino_with_dense_head(policy):
    """DINO behind a user's one-Dense head, whose logits are float16 under `mixed_float16`."""
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(1)
    # Wide logits: the teacher's sharpened softmax has probabilities below float16's range.
    dense = keras.layers.Dense(16, kernel_initializer=keras.initializers.RandomNormal(stddev=1.0))
    head = keras.Sequential([keras.Input((4,)), dense])
    model = ContrastiveModel(tiny_backbone(), head, algorithm="dino")
    keras.config.set_dtype_policy("float32")
    return model


def test_dino_teacher_is_centred_and_sharpened_in_float32_behind_a_float16_head():
    reference, model = dino_with_dense_head("float32"), dino_with_dense_head("mixed_float16")
    model.set_weights(reference.get_weights())
    optimizer = keras.mixed_precision.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=INITIAL_SCALE
    )
    reference.compile(optimizer=keras.optimizers.SGD(0.1))
    model.compile(optimizer=optimizer)
    batch = tf.stack(views(0), axis=1)

    expected, logs = reference.train_step(batch), model.train_step(batch)

    assert model.projector.outputs[0].dtype == "float16"
    for name in ("loss", "teacher_entropy"):
        got, want = float(logs[name]), float(expected[name])
        np.testing.assert_allclose(got, want, rtol=1e-2, err_msg=name)
