"""Worker of the multi-worker metric-loss test (run with TF_CONFIG set).

Usage: python mwms_metric_worker.py DIR
Reads DIR/data.npz (x, labels, kernel) and trains a Dense model for one SGD
step with TripletLoss and with MultiSimilarityLoss over the global batch split
between the workers, along the two user paths that work under
MultiWorkerMirroredStrategy in Keras 3 (see `MetricLoss`): a custom training
loop (`strategy.run` and `optimizer.apply_gradients`) and `fit` on batches
that pack `(x, y)` into one tensor. Writes DIR/<loss>_<path>_worker<k>.npz
with the loss and the updated kernel.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tensorflow_similarity.losses import MultiSimilarityLoss, TripletLoss  # noqa: E402

LOSSES = {"triplet": TripletLoss, "multisim": MultiSimilarityLoss}
LEARNING_RATE = 0.5


class PackedLabelsModel(keras.Model):
    """A functional model trained on `[n, d + 1]` batches: features, then the label."""

    def train_step(self, data):
        x, y = data[:, :-1], tf.cast(data[:, -1], tf.int64)
        logs = super().train_step((x, y))
        # Keras reduces the logs across workers with reduce(MEAN, axis=0),
        # which fails on scalars (keras-team/keras#20585).
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}


def _dataset(data, packed: bool) -> tf.data.Dataset:
    # Sharding by data: worker 0 trains on the first half of the batch, worker 1
    # on the second.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    x, labels = data["x"], data["labels"]
    if packed:
        rows = np.concatenate([x, labels[:, None].astype(x.dtype)], axis=1)
        dataset = tf.data.Dataset.from_tensor_slices(rows)
    else:
        dataset = tf.data.Dataset.from_tensor_slices((x, labels.astype("int64")))
    return dataset.batch(len(x)).with_options(options)


def _model(data, cls=keras.Model) -> keras.Model:
    inputs = keras.Input(data["x"].shape[1:])
    dense = keras.layers.Dense(4, use_bias=False, name="dense")
    model = cls(inputs, dense(inputs))
    dense.kernel.assign(data["kernel"])
    return model


def custom_loop_step(strategy, data, make_loss) -> tuple[float, np.ndarray]:
    with strategy.scope():
        model = _model(data)
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        optimizer.build(model.trainable_variables)
    loss = make_loss()

    @tf.function
    def step(batch):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                value = loss(y, model(x, training=True))
            grads = tape.gradient(value, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return value

        return strategy.run(replica_step, args=batch)

    batches = strategy.experimental_distribute_dataset(_dataset(data, packed=False))
    # Each replica returns the global loss / K.
    local = strategy.experimental_local_results(step(next(iter(batches))))[0]
    return float(local) * strategy.num_replicas_in_sync, model.get_layer("dense").kernel.numpy()


def packed_fit_step(strategy, data, make_loss) -> tuple[float, np.ndarray]:
    with strategy.scope():
        model = _model(data, PackedLabelsModel)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE), loss=make_loss())
        # Builds the compiled loss now: fit's symbolic build would otherwise call
        # the model on the packed batch.
        model.compute_loss(y=data["labels"][:2], y_pred=model(data["x"][:2]))
    history = model.fit(_dataset(data, packed=True), epochs=1, steps_per_epoch=1, verbose=0)
    return history.history["loss"][0], model.get_layer("dense").kernel.numpy()


def main(directory: str) -> None:
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = np.load(os.path.join(directory, "data.npz"))
    for name, make_loss in LOSSES.items():
        for path, run in (("loop", custom_loop_step), ("fit", packed_fit_step)):
            value, kernel = run(strategy, data, make_loss)
            np.savez(
                os.path.join(directory, f"{name}_{path}_worker{task}.npz"),
                loss=value,
                kernel=kernel,
            )


if __name__ == "__main__":
    main(sys.argv[1])
