"""Worker of the multi-worker metric-loss test (run with TF_CONFIG set).

Usage: python mwms_metric_worker.py DIR
Reads DIR/data.npz (x, labels, kernel), runs one SGD step (the one `fit` runs)
of a Dense model with TripletLoss and with MultiSimilarityLoss over the global batch
split between the workers, and writes DIR/<loss>_worker<k>.npz with the loss
and the updated kernel.
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


def main(directory: str) -> None:
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = np.load(os.path.join(directory, "data.npz"))
    # Sharding by data: worker 0 trains on the first half of the batch, worker 1 on
    # the second. int64 labels: int32 ones stay on the host, where Keras cannot
    # reduce the distributed batch it builds the compiled loss from.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((data["x"], data["labels"].astype("int64")))
        .batch(len(data["x"]))
        .with_options(options)
    )
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    for name, make_loss in LOSSES.items():
        with strategy.scope():
            model = keras.Sequential(
                [keras.Input(data["x"].shape[1:]), keras.layers.Dense(4, use_bias=False)]
            )
            model.layers[0].kernel.assign(data["kernel"])
            optimizer = keras.optimizers.SGD(learning_rate=0.5)
            optimizer.build(model.trainable_variables)
        loss = make_loss()

        # The step `fit` runs. fit itself cannot be used: under this strategy,
        # Keras 3's symbolic build before the first step reduces the (x, y)
        # batch with strategy.reduce, which MultiWorkerMirroredStrategy
        # rejects for a nested batch (a Keras defect, independent of the loss).
        @tf.function
        def step(x, y, model=model, optimizer=optimizer, loss=loss):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    value = loss(y, model(x, training=True))
                grads = tape.gradient(value, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
                return value

            return strategy.run(replica_step, args=(x, y))

        # Each replica returns the global loss / K.
        local = strategy.experimental_local_results(step(*batch))[0]
        value = local * strategy.num_replicas_in_sync
        np.savez(
            os.path.join(directory, f"{name}_worker{task}.npz"),
            loss=value.numpy(),
            kernel=model.layers[0].kernel.numpy(),
        )


if __name__ == "__main__":
    main(sys.argv[1])
