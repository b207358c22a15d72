"""`cli.fitting`: global batches split over the replicas as `fit` splits them; divergence."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.cli.errors import TrainingDiverged
from tensorflow_similarity.cli.fitting import (
    EvaluationSchedule,
    StopOnNonFinite,
    parallel_batches,
    replica_batches,
)
from tensorflow_similarity.testing import mirrored_strategy


def _global_batches(batch_size: int) -> tf.data.Dataset:
    def batch(n: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.random.stateless_normal(
            [batch_size, 3], seed=tf.stack([n, tf.constant(7, tf.int64)])
        )
        return x, tf.reduce_sum(x, axis=1, keepdims=True)

    return parallel_batches(tf.data.Dataset.range(6), batch, deterministic=True)


@pytest.mark.parametrize("replicas", [2, 4])
def test_each_replica_gets_the_slice_fit_would_give_it(replicas):
    strategy = mirrored_strategy(replicas)
    ours = iter(replica_batches(_global_batches(8), strategy))
    keras_split = iter(strategy.experimental_distribute_dataset(_global_batches(8)))
    for _ in range(6):
        for mine, theirs in zip(next(ours), next(keras_split), strict=True):
            mine = strategy.experimental_local_results(mine)
            theirs = strategy.experimental_local_results(theirs)
            assert len(mine) == len(theirs) == replicas
            for a, b in zip(mine, theirs, strict=True):
                assert a.shape[0] == 8 // replicas
                np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_fit_on_the_replica_batches_trains_as_on_the_global_batches():
    strategy = mirrored_strategy(2)
    weights = []
    for split in (False, True):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
            model.compile(keras.optimizers.SGD(0.1), "mse")
        dataset = _global_batches(8)
        model.fit(
            replica_batches(dataset, strategy) if split else dataset,
            epochs=2,
            steps_per_epoch=3,
            verbose=0,
        )
        weights.append([w.numpy() for w in model.weights])
    for ours, plain in zip(*weights, strict=True):
        np.testing.assert_allclose(ours, plain, rtol=1e-6, atol=1e-7)
    assert not np.allclose(weights[0][1], 0.0)  # the bias moved: training happened


def test_what_cannot_be_split_evenly_is_left_to_fit():
    dataset = _global_batches(10)
    assert replica_batches(dataset, mirrored_strategy(4)) is dataset  # 10 rows, 4 replicas
    assert replica_batches(dataset, mirrored_strategy(1)) is dataset
    assert replica_batches(dataset, tf.distribute.get_strategy()) is dataset
    unequal = tf.data.Dataset.from_tensors((tf.zeros([4, 2]), tf.zeros([2])))
    assert replica_batches(unequal, mirrored_strategy(2)) is unequal


def test_training_stops_at_the_first_non_finite_loss():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(1e30), "mse")
    seen = []
    after = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b))
    with pytest.raises(TrainingDiverged) as diverged:
        model.fit(
            _global_batches(8),
            epochs=3,
            steps_per_epoch=3,
            callbacks=[StopOnNonFinite(3, 1e30, advice=False), after],
            verbose=0,
        )
    error = diverged.value
    assert error.what in ("the loss became nan", "the loss became inf")
    assert (error.epoch, error.steps, error.learning_rate) == (1, 3, 1e30)
    assert error.epochs_done == error.epoch - 1
    assert str(error) == f"{error.what} at epoch {error.epoch}, step {error.step} of 3"
    # The callbacks after it never saw the step that diverged.
    assert len(seen) == (error.epoch - 1) * 3 + error.step - 1


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_non_finite_weight_stops_training_at_the_epochs_end(replicas):
    # Moving batch-norm statistics can overflow while the loss, of batch statistics, is finite.
    with mirrored_strategy(replicas).scope():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.BatchNormalization(name="bn")], name="net"
        )
    stop = StopOnNonFinite(5, 0.1, advice=False)
    stop.set_model(model)
    stop.on_epoch_begin(1)
    stop.on_epoch_end(1, {"loss": 0.5})  # all finite: nothing happens
    model.get_layer("bn").moving_variance.assign(tf.fill([3], float("inf")))
    with pytest.raises(TrainingDiverged) as diverged:
        stop.on_epoch_end(1, {"loss": 0.5})
    assert str(diverged.value) == (
        "1 weight became nan or infinite (net/bn/moving_variance) at the end of epoch 2"
    )
    assert diverged.value.epochs_done == 1


class _Recorder(keras.callbacks.Callback):
    def __init__(self, epochs: list[int]) -> None:
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((id(self), epoch, self.model is not None))


@pytest.mark.parametrize(
    "every, epochs, expected", [(1, 3, [0, 1, 2]), (3, 7, [2, 5, 6]), (4, 4, [3]), (9, 2, [1])]
)
def test_the_evaluation_schedule_runs_its_callbacks_every_n_epochs_and_after_the_last(
    every, epochs, expected
):
    fired: list = []
    first, second = _Recorder(fired), _Recorder(fired)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((4, 1), np.float32)
    schedule = EvaluationSchedule([first, second], every, epochs)
    model.fit(x, x, epochs=epochs, verbose=0, callbacks=[schedule])
    # Both callbacks, in order, after the scheduled epochs only, with the model set.
    assert fired == [(id(c), e, True) for e in expected for c in (first, second)]
