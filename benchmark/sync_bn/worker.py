"""One worker of the `multiworker` section of `python -m benchmark.sync_bn` (not run by hand).

`benchmark/sync_bn/multiworker.py` starts two copies (`python -m benchmark.sync_bn.worker`)
with a shared `TF_CONFIG`; each creates a `tf.distribute.MultiWorkerMirroredStrategy`
(one CPU replica per process), builds the ResNet training step of every variant with
identical weights, and times them interleaved. Worker 0 writes the times to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.sync_bn import resnet  # noqa: E402
from benchmark.sync_bn.common import ResNetSetting  # noqa: E402


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("ResNet-18", "ResNet-50"), required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--batch-per-replica", type=int, required=True)
    parser.add_argument("--variants", required=True, help="Comma-separated, e.g. plain,ours.")
    parser.add_argument("--reps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if "TF_CONFIG" not in os.environ:
        raise SystemExit(
            "benchmark.sync_bn.worker needs TF_CONFIG naming the cluster and this worker's "
            "index; run `python -m benchmark.sync_bn --sections multiworker`, which starts "
            "the workers."
        )
    # The strategy must exist before any other TensorFlow op runs in this process.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    setting = ResNetSetting(
        args.model, args.image_size, args.batch_per_replica, replica_counts=(2,)
    )
    keras.utils.set_random_seed(0)
    weights = resnet.build_resnet_variant(setting, "plain").get_weights()
    steps = {
        variant: resnet.make_embedding_train_step(strategy, setting, variant, weights)
        for variant in args.variants.split(",")
    }
    measured = resnet.time_train_steps(steps, args.reps, warmup=1)
    if strategy.cluster_resolver.task_id == 0:
        args.out.write_text(json.dumps(measured))


if __name__ == "__main__":
    main()
