"""Where global mining and synchronised batch norm should matter for a metric loss.

Synchronised batch norm and global-batch mining are used where each device
holds 1-4 images. This trains a supervised similarity model with
`MultiSimilarityLoss` in that regime, 2 and 4 images per replica (global
batches of 8 and 16 over 4 replicas), under four settings that see exactly the
same global batches from the same initial weights:

* (a) `per_replica`: 4 replicas, plain batch norm, each replica mines its
  own share (`metric_losses.PerReplicaMining`): tensorflow-similarity 0.17;
* (b) `per_replica_bn`: 4 replicas, plain batch norm, global mining;
* (c) `sync`: 4 replicas, synchronised batch norm, global mining (ours);
* (d) `single`: one device holding the global batch.

(b) - (a) isolates the mining, (c) - (b) the batch norm, (c) - (d) checks
that (c) is what one device would do. (Synchronised batch norm with
per-replica mining is left out: with these batches per-replica mining has no
gradient at all, see below, so it would only repeat (a).)

The model is `ssl_quality.py`'s small ResNet-style backbone (without its
pooling) under the package's head (`BackboneSim`: average pooling, 64-d
`MetricEmbedding`), at the digits' 8x8. Batches come from a
`MultiShotMemorySampler` of 4 classes a batch, grouped by class as 0.17's
samplers made them, so each replica's share holds a single class: per-replica
mining then finds no negative, every anchor contributes 0, and (a)'s loss is
exactly 0 (never NaN) in every step, which is the point of the regime. Trained
on the training images of digits 0-5; evaluated by leave-one-out retrieval
(recall@1, mAP@R) among the held-out test images of digits 0-5 (seen classes)
and among all images of digits 6-9 (unseen classes), next to the untrained
model of each seed. The replicas are logical CPUs of one host.

Results go to `<out>/metric_small_batch.json`, `.md` and `.png` (the paired
differences per seed): `benchmark/results` for a full run, a new temporary
folder (printed) for a `--quick` one. `benchmark/report.py` adds them to
`REPORT.md`; `metric_small_batch_tables.py` renders them.

Usage:

    python benchmark/metric_small_batch.py            # full run, ~15-20 min on 2 cores
    python benchmark/metric_small_batch.py --quick    # smoke run: 2 seeds, 3 steps
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchmark_common import output_folder  # noqa: E402
from metric_losses import PerReplicaMining, retrieval_scores  # noqa: E402
from metric_small_batch_tables import (  # noqa: E402
    CLASSES_PER_BATCH,
    NUM_REPLICAS,
    SETTINGS,
    plot_paired_differences,
    render_markdown,
)
from ssl_quality import build_backbone  # noqa: E402

from tensorflow_similarity.architectures import BackboneSim  # noqa: E402
from tensorflow_similarity.datasets import load_data  # noqa: E402
from tensorflow_similarity.losses import MultiSimilarityLoss  # noqa: E402
from tensorflow_similarity.samplers import MultiShotMemorySampler  # noqa: E402

SCRIPT = "metric_small_batch"
IMAGE_SIZE = 8
WIDTH = 16
EMBEDDING_SIZE = 64
LEARNING_RATE = 0.05
TRAIN_CLASSES = (0, 1, 2, 3, 4, 5)
# name -> (replicas, synchronised batch norm, mining)
SETTING_SPECS = {
    "per_replica": (NUM_REPLICAS, False, "per replica"),
    "per_replica_bn": (NUM_REPLICAS, False, "global"),
    "sync": (NUM_REPLICAS, True, "global"),
    "single": (1, False, "global"),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 3 steps")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 4)")
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (default 50)")
    args = parser.parse_args(argv)
    args.batch_sizes = (2, 4)
    args.seeds = tuple(range(args.seeds if args.seeds is not None else (2 if args.quick else 3)))
    args.epochs = args.epochs if args.epochs is not None else (1 if args.quick else 4)
    args.steps = args.steps if args.steps is not None else (3 if args.quick else 50)
    for name, value in (("--seeds", len(args.seeds)), ("--epochs", args.epochs)):
        if value < 1:
            parser.error(f"{name} must be at least 1; got {value}.")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1; got {args.steps}.")
    return args


def make_strategy() -> tf.distribute.MirroredStrategy:
    """A MirroredStrategy over `NUM_REPLICAS` logical CPUs, made before TensorFlow starts."""
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS,
    )
    cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
    keyed = type(
        "MetricSmallBatchStrategy",
        (tf.distribute.MirroredStrategy,),
        {"_collective_key_base": 10_000 * NUM_REPLICAS},
    )
    return keyed(cpus[:NUM_REPLICAS])


def build_model(sync_bn: bool) -> keras.Model:
    """`ssl_quality.py`'s backbone up to its last feature map, under the package's head."""
    backbone = build_backbone(IMAGE_SIZE, WIDTH)
    features = keras.Model(
        backbone.input, backbone.get_layer("stage2_relu2").output, name="small_resnet"
    )
    return BackboneSim(features, embedding_size=EMBEDDING_SIZE, pooling="avg", sync_bn=sync_bn)


def copy_weights(source: keras.Model, target: keras.Model) -> None:
    """Copies every weight, checking that both models list the same variables in the same order.

    Raises:
        ValueError: If a variable's layer, name or shape differs.
    """
    for mine, theirs in zip(source.weights, target.weights, strict=True):
        where = lambda v: (v.path.split("/")[-2:], tuple(v.shape))  # noqa: E731
        if where(mine) != where(theirs):
            raise ValueError(f"copy_weights: {mine.path} does not match {theirs.path}.")
        theirs.assign(mine)


def batches(
    images: np.ndarray, labels: np.ndarray, per_replica: int, steps: int, seed: int
) -> tf.data.Dataset:
    """The sampler's first `steps` global batches, the same for every setting of a seed.

    An unknown batch dimension lets one traced training step serve both batch
    sizes.
    """
    sampler = MultiShotMemorySampler(
        images,
        labels,
        classes_per_batch=CLASSES_PER_BATCH,
        examples_per_class_per_batch=per_replica,
        steps_per_epoch=steps,
        seed=seed,
    )
    drawn = [sampler[i] for i in range(steps)]
    x = np.stack([np.asarray(b[0]) for b in drawn])
    y = np.stack([np.asarray(b[1]) for b in drawn]).astype("int64")

    def loose(x, y):
        return (
            tf.compat.v1.placeholder_with_default(x, [None, *x.shape[1:]]),
            tf.compat.v1.placeholder_with_default(y, [None]),
        )

    return tf.data.Dataset.from_tensor_slices((x, y)).map(loose)


def embedding_function(model: keras.Model) -> Callable[[np.ndarray], np.ndarray]:
    """Inference on one device, traced once for any number of images."""
    spec = tf.TensorSpec([None, IMAGE_SIZE, IMAGE_SIZE, 3], tf.float32)
    embed = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    return lambda x: embed(tf.constant(x)).numpy()


def scores(embed: Callable[[np.ndarray], np.ndarray], splits: dict[str, Any]) -> dict[str, float]:
    """`<split>_recall@1` and `<split>_map@r` of leave-one-out retrieval in each split."""
    found = {}
    for split, (images, labels) in splits.items():
        for metric, value in retrieval_scores(embed(images), labels).items():
            found[f"{split}_{metric}"] = float(value)
    return found


class Trainer:
    """One compiled model per setting, reset to a seed's weights before each run.

    Tracing a 4-replica step costs more than a run's training here, so the
    model, its optimizer and its traced step are kept; each run copies the
    seed's initial weights in and puts back the optimizer's freshly built
    state (zero momenta and iteration count, the learning rate kept).
    """

    def __init__(self, setting: str, strategy: tf.distribute.Strategy) -> None:
        replicas, sync_bn, mining = SETTING_SPECS[setting]
        self.setting = setting
        self.strategy = strategy if replicas > 1 else tf.distribute.get_strategy()
        with self.strategy.scope():
            self.model = build_model(sync_bn)
            loss = MultiSimilarityLoss()
            self.model.compile(
                optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
                loss=loss if mining == "global" else PerReplicaMining(loss),
                jit_compile=False,
            )
            self.model.optimizer.build(self.model.trainable_variables)
        self.fresh_optimizer = [v.numpy() for v in self.model.optimizer.variables]
        self.embed = embedding_function(self.model)

    def run(
        self, reference: keras.Model, data: tf.data.Dataset, config: argparse.Namespace
    ) -> dict[str, Any]:
        copy_weights(reference, self.model)
        for variable, value in zip(
            self.model.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            variable.assign(value)
        started = time.perf_counter()
        history = self.model.fit(
            data.repeat(), epochs=config.epochs, steps_per_epoch=config.steps, verbose=0
        )
        return {
            "losses": [float(v) for v in history.history["loss"]],
            "train_s": round(time.perf_counter() - started, 1),
        }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    config = parse_args(argv[1:])
    strategy = make_strategy()
    out = output_folder(config.out, config.quick, SCRIPT)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = load_data("digits", IMAGE_SIZE, seed=0)
    seen_train = np.isin(data.y_train, TRAIN_CLASSES)
    seen_test = np.isin(data.y_test, TRAIN_CLASSES)
    x_train, y_train = data.x_train[seen_train], data.y_train[seen_train]
    splits = {
        "seen": (data.x_test[seen_test], data.y_test[seen_test]),
        "unseen": (
            np.concatenate([data.x_train[~seen_train], data.x_test[~seen_test]]),
            np.concatenate([data.y_train[~seen_train], data.y_test[~seen_test]]),
        ),
    }
    payload: dict[str, Any] = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", f"benchmark/{SCRIPT}.py", *argv[1:]]),
            "machine": f"{NUM_REPLICAS} logical CPU devices on {os.cpu_count()} CPU cores "
            f"({platform.machine()})",
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "quick": config.quick,
            "batch_sizes": list(config.batch_sizes),
            "seeds": list(config.seeds),
            "epochs": config.epochs,
            "steps_per_epoch": config.steps,
            "learning_rate": LEARNING_RATE,
            "train_images": len(x_train),
            "seen_images": len(splits["seen"][1]),
            "unseen_images": len(splits["unseen"][1]),
        },
        "untrained": [],
        "runs": [],
    }
    # Every seed's initial model first: setting TensorFlow's seed clears its kernel cache,
    # which would make each trained model instantiate its 4-replica step again.
    references = {}
    for seed in config.seeds:
        keras.utils.set_random_seed(seed)
        references[seed] = build_model(sync_bn=False)
    trainers = {setting: Trainer(setting, strategy) for setting in SETTINGS}
    print(f"[{time.perf_counter() - started:.0f} s] models built", flush=True)

    def write(complete: bool) -> None:
        payload["meta"]["complete"] = complete
        payload["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
        (out / f"{SCRIPT}.json").write_text(json.dumps(payload, indent=2) + "\n")

    for seed in config.seeds:
        reference = references[seed]
        payload["untrained"].append({"seed": seed} | scores(embedding_function(reference), splits))
        for per_replica in config.batch_sizes:
            data_of_seed = batches(
                x_train, y_train, per_replica, config.steps * config.epochs, seed
            )
            for setting, trainer in trainers.items():
                row = {
                    "setting": setting,
                    "batch_per_replica": per_replica,
                    "global_batch": NUM_REPLICAS * per_replica,
                    "seed": seed,
                }
                row |= trainer.run(reference, data_of_seed, config)
                row |= scores(trainer.embed, splits)
                payload["runs"].append(row)
                print(
                    f"[{time.perf_counter() - started:.0f} s] b={per_replica} seed {seed} "
                    f"{setting}: loss {row['losses'][0]:.4f} -> {row['losses'][-1]:.4f}, "
                    f"seen recall@1 {row['seen_recall@1']:.3f}, unseen recall@1 "
                    f"{row['unseen_recall@1']:.3f} ({row['train_s']} s)",
                    flush=True,
                )
        write(complete=False)
    write(complete=True)
    markdown = render_markdown(payload)
    (out / f"{SCRIPT}.md").write_text(markdown)
    plot_paired_differences(payload, out / f"{SCRIPT}.png")
    print(markdown)
    print(f"Wrote {out / f'{SCRIPT}.md'}, .json and .png", flush=True)
    return payload


if __name__ == "__main__":
    main()
