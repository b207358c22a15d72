"""Worker of the multi-worker momentum-teacher test (run with TF_CONFIG set).

Usage: python mwms_teacher_worker.py DIR
Trains BYOL with LARS and `accumulation_steps=2` in float64 for two optimizer
steps (four batches, each split between the workers) from DIR/initial.npz on
DIR/views.npz, and writes DIR/worker<k>.npz with the losses and every weight.
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

from tests.models.test_momentum_teachers import mwms_run  # noqa: E402


def main(directory: str) -> None:
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    views = np.load(os.path.join(directory, "views.npz"))
    initial = np.load(os.path.join(directory, "initial.npz"))
    loss, weights = mwms_run(strategy, views, [initial[f"w{i}"] for i in range(len(initial.files))])
    np.savez(
        os.path.join(directory, f"worker{task}.npz"),
        loss=np.asarray(loss),
        **{f"w{i}": w for i, w in enumerate(weights)},
    )


if __name__ == "__main__":
    main(sys.argv[1])
