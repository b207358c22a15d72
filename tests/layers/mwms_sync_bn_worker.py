"""Worker of the multi-worker SyncBatchNormalization test (run with TF_CONFIG set).

Usage: python mwms_sync_bn_worker.py OUT_DIR SIZES  (SIZES: comma-separated per-worker batch)
Every worker draws the same global batch from a fixed seed, feeds its own slice,
runs one training step and saves its outputs, gradients and moving statistics.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tensorflow_similarity.layers import SyncBatchNormalization  # noqa: E402


def main(out_dir: str, sizes_arg: str) -> None:
    sizes = [int(s) for s in sizes_arg.split(",")]
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == len(sizes)

    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 2.0, size=(sum(sizes), 4, 5)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    gamma = rng.uniform(0.5, 1.5, 5).astype("float32")
    beta = rng.normal(size=5).astype("float32")
    starts = np.cumsum([0, *sizes])

    with strategy.scope():
        layer = SyncBatchNormalization(momentum=0.5)
        layer.build(x.shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)

    def local(values):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(
                values[
                    starts[ctx.replica_id_in_sync_group] : starts[ctx.replica_id_in_sync_group + 1]
                ]
            )
        )

    def step(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * upstream)
        dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
        ctx = tf.distribute.get_replica_context()
        return y, dx, ctx.all_reduce("SUM", dgamma), ctx.all_reduce("SUM", dbeta)

    run = tf.function(lambda a, b: strategy.run(step, args=(a, b)))
    y, dx, dgamma, dbeta = (
        strategy.experimental_local_results(t)[0] for t in run(local(x), local(upstream))
    )
    np.savez(
        os.path.join(out_dir, f"worker{task}.npz"),
        y=y.numpy(),
        dx=dx.numpy(),
        dgamma=dgamma.numpy(),
        dbeta=dbeta.numpy(),
        moving_mean=layer.moving_mean.numpy(),
        moving_variance=layer.moving_variance.numpy(),
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
