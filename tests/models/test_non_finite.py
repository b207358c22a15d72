"""A NaN or infinite pixel under 2 replicas with sync batch norm: the loss and the error say so."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.callbacks import StopOnNonFinite, TrainingDiverged
from tensorflow_similarity.layers import MetricEmbedding
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.models import SimilarityModel, create_contrastive_model
from tensorflow_similarity.models.non_finite import nan_unless_finite
from tensorflow_similarity.testing import mirrored_strategy

SHAPE = (6, 6, 2)
BATCH = 8


def _images(bad: float | None, n: int = 2 * BATCH, seed: int = 0) -> np.ndarray:
    images = np.random.default_rng(seed).normal(size=(n, *SHAPE)).astype("float32")
    if bad is not None:
        images[3, 2, 2, 0] = bad
    return images


def _backbone(head: bool) -> keras.Model:
    # A ResNet stem in miniature, its max pooling included (which drops NaN).
    inputs = keras.Input(SHAPE)
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = SyncBatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(4, 1)(x)
    x = SyncBatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = MetricEmbedding(8)(x) if head else x
    return inputs, outputs


def _similarity_model(replicas: int = 2) -> SimilarityModel:
    keras.utils.set_random_seed(0)
    with mirrored_strategy(replicas).scope():
        model = SimilarityModel(*_backbone(head=True))
        model.compile("adam", loss=MultiSimilarityLoss())
    return model


def _contrastive_model(algorithm: str):
    keras.utils.set_random_seed(0)
    with mirrored_strategy(2).scope():
        model = create_contrastive_model(
            keras.Model(*_backbone(head=False)),
            algorithm,
            projector_hidden_dim=8,
            projector_output_dim=8,
            predictor_hidden_dim=4,
            sync_bn=True,
        )
        model.compile("adam")
    return model


def _fit(model, images: np.ndarray, **kwargs):
    if isinstance(model, SimilarityModel):
        labels = np.arange(len(images)) % 4
        return model.fit(images, labels, batch_size=BATCH, shuffle=False, verbose=0, **kwargs)
    pairs = tf.data.Dataset.from_tensor_slices((images, images[::-1].copy())).batch(BATCH)
    return model.fit(pairs, shuffle=False, verbose=0, **kwargs)


MODELS = {
    "similarity": _similarity_model,
    "simsiam": lambda: _contrastive_model("simsiam"),
    "simclr": lambda: _contrastive_model("simclr"),
}


def _all_finite(model) -> bool:
    return all(np.isfinite(np.asarray(w)).all() for w in model.weights)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_bad_pixel_stops_fit_with_the_epoch_and_step(kind, bad):
    model = MODELS[kind]()
    with pytest.raises(TrainingDiverged) as diverged:
        _fit(model, _images(bad), epochs=2)
    error = diverged.value
    assert (error.epoch, error.step, error.steps) == (1, 1, 2)
    assert error.what == "the loss became nan"
    message = str(error)
    assert message.startswith("the loss became nan at epoch 1, step 1 of 2. ")
    assert "NaN or infinite" in message and "learning rate" in message


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_with_the_stop_off_the_loss_is_nan_whenever_the_weights_are(kind):
    model = MODELS[kind]()
    history = _fit(model, _images(float("nan")), epochs=1, stop_on_non_finite=False)
    assert not _all_finite(model)
    assert all(np.isnan(loss) for loss in history.history["loss"]), history.history


def test_a_finite_run_is_not_stopped_and_its_loss_unchanged():
    model = _similarity_model(1)
    history = _fit(model, _images(None), epochs=1)
    assert np.isfinite(history.history["loss"][0]) and _all_finite(model)


def test_a_callback_passed_by_the_user_is_not_doubled():
    model = _similarity_model(1)
    mine = StopOnNonFinite(advice=False)
    with pytest.raises(TrainingDiverged) as diverged:
        _fit(model, _images(float("nan")), epochs=1, callbacks=[mine])
    assert str(diverged.value) == "the loss became nan at epoch 1, step 1 of 2"


def test_callbacks_given_positionally_get_the_stop_too():
    model = _similarity_model(1)
    seen = []
    mine = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b))
    labels = np.arange(2 * BATCH) % 4
    with pytest.raises(TrainingDiverged):
        model.fit(_images(float("nan")), labels, BATCH, 1, 0, [mine])
    assert seen == []  # stopped before the user's callback saw the step


def test_stop_on_non_finite_must_be_a_bool_before_training():
    model = _similarity_model(1)
    with pytest.raises(TypeError, match="stop_on_non_finite must be True or False"):
        _fit(model, _images(None), epochs=1, stop_on_non_finite="no")
    assert model.optimizer.iterations.numpy() == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_max_pooling_hides_a_nan_and_the_guard_restores_it(bad):
    # Why the loss was finite: an all-NaN window max-pools to the lowest float.
    maps = tf.fill([1, 2, 2, 1], float("nan"))
    assert np.isfinite(tf.nn.max_pool2d(maps, 2, 2, "VALID").numpy()).all()
    loss = tf.constant(1.5)
    assert float(nan_unless_finite(loss, tf.constant([[0.0, 1.0]]), [])) == 1.5
    assert np.isnan(float(nan_unless_finite(loss, tf.constant([[bad, 1.0]]), [])))
    weight = keras.Variable([1.0, bad])
    assert np.isnan(float(nan_unless_finite(loss, tf.constant([[0.0]]), [weight])))
    # Integer inputs (labels) are not checked.
    assert float(nan_unless_finite(loss, tf.constant([1, 2]), [])) == 1.5


def test_the_guard_keeps_the_gradient_of_a_finite_step():
    x = tf.constant([[1.0, 2.0]])
    weight = tf.Variable([3.0, 4.0])
    with tf.GradientTape() as tape:
        loss = nan_unless_finite(tf.reduce_sum(x * weight), x, [weight])
    np.testing.assert_array_equal(tape.gradient(loss, weight).numpy(), [1.0, 2.0])


def test_fitting_one_class_warns():
    model = _similarity_model(1)
    with pytest.warns(UserWarning, match="at least two classes"):
        model.fit(_images(None), np.zeros(2 * BATCH, "int32"), batch_size=BATCH, verbose=0)


def test_fitting_several_classes_does_not_warn():
    model = _similarity_model(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.fit(
            _images(None), np.arange(2 * BATCH) % 4, batch_size=BATCH, shuffle=False, verbose=0
        )
