"""StopOnNonFinite: raises at the first non-finite loss or weight, with when and what to check."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import callbacks
from tensorflow_similarity.callbacks import StopOnNonFinite, TrainingDiverged
from tensorflow_similarity.cli import errors, fitting


def _model(learning_rate: float = 0.1) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    return model


def _data(bad_row: int | None) -> tf.data.Dataset:
    x = np.ones((6, 2), "float32")
    if bad_row is not None:
        x[bad_row, 0] = np.nan
    return tf.data.Dataset.from_tensor_slices((x, np.zeros(6, "float32"))).batch(2)


def test_a_nan_loss_raises_with_the_step_and_what_to_check():
    with pytest.raises(TrainingDiverged) as diverged:
        _model(0.25).fit(_data(3), epochs=2, callbacks=[StopOnNonFinite()], verbose=0)
    error = diverged.value
    assert (error.epoch, error.step, error.steps, error.epochs_done) == (1, 2, 3, 0)
    assert error.learning_rate == 0.25
    assert str(error).startswith("the loss became nan at epoch 1, step 2 of 3. Check the inputs")
    assert "lower the learning rate (it is 0.25)" in str(error)


def test_keras_terminate_on_nan_stops_silently_where_ours_raises():
    history = _model().fit(
        _data(3), epochs=2, callbacks=[keras.callbacks.TerminateOnNaN()], verbose=0
    )
    assert np.isnan(history.history["loss"][-1])


def test_a_finite_run_is_left_alone():
    history = _model().fit(_data(None), epochs=2, callbacks=[StopOnNonFinite()], verbose=0)
    assert len(history.history["loss"]) == 2


def test_without_advice_the_message_is_the_cli_one():
    with pytest.raises(TrainingDiverged) as diverged:
        _model().fit(_data(0), callbacks=[StopOnNonFinite(3, 0.1, advice=False)], verbose=0)
    assert str(diverged.value) == "the loss became nan at epoch 1, step 1 of 3"


def test_it_is_serialisable_and_the_cli_names_are_the_same_objects():
    stop = StopOnNonFinite(4, 0.5, advice=False)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(stop))
    assert isinstance(again, StopOnNonFinite)
    assert again.get_config() == {"steps_per_epoch": 4, "learning_rate": 0.5, "advice": False}
    assert fitting.StopOnNonFinite is callbacks.StopOnNonFinite
    assert errors.TrainingDiverged is callbacks.TrainingDiverged


def test_the_step_count_is_omitted_when_unknown():
    error = TrainingDiverged("the loss became inf", 2, 5, None, None, 1)
    assert str(error) == "the loss became inf at epoch 2, step 5"
