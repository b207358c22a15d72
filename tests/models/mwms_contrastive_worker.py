"""Worker of the multi-worker ContrastiveModel test (run with TF_CONFIG set).

Usage: python mwms_contrastive_worker.py DIR
Reads DIR/initial_<algorithm>.npz and DIR/views.npz, runs one `fit` step of each
algorithm over the global batch split between the workers, and writes
DIR/<algorithm>_worker<k>.npz with the loss and the updated weights.
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

from tests.models.contrastive_fixtures import ALGORITHMS, tiny_model  # noqa: E402


def main(directory: str) -> None:
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    views = np.load(os.path.join(directory, "views.npz"))
    view1, view2 = views["view1"], views["view2"]

    # Sharding by data splits each global batch into per-worker batches in order:
    # worker 0 trains on the first half of the batch, worker 1 on the second.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = (
        tf.data.Dataset.from_tensor_slices((view1, view2)).batch(len(view1)).with_options(options)
    )

    for algorithm in ALGORITHMS:
        initial = np.load(os.path.join(directory, f"initial_{algorithm}.npz"))
        with strategy.scope():
            model = tiny_model(algorithm)
            model.set_weights([initial[f"w{i}"] for i in range(len(initial.files))])
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5))
        history = model.fit(data, epochs=1, steps_per_epoch=1, verbose=0)
        weights = {f"w{i}": w.numpy() for i, w in enumerate(model.weights)}
        # From the initial weights again, at a gentler rate: the loss must go down.
        model.set_weights([initial[f"w{i}"] for i in range(len(initial.files))])
        model.optimizer.learning_rate.assign(0.01)
        more = model.fit(data, epochs=5, verbose=0).history["loss"]
        np.savez(
            os.path.join(directory, f"{algorithm}_worker{task}.npz"),
            loss=history.history["loss"][0],
            more_losses=np.asarray(more, dtype="float64"),
            **weights,
        )


if __name__ == "__main__":
    main(sys.argv[1])
