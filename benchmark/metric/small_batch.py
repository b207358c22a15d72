"""Where global mining and synchronised batch norm should matter for a metric loss.

Synchronised batch norm and global-batch mining are used where each device
holds 1-4 images. This trains a supervised similarity model with
`MultiSimilarityLoss` in that regime, 2 and 4 images per replica (global
batches of 8 and 16 over 4 replicas), under four settings that see exactly the
same global batches from the same initial weights:

* (a) `per_replica`: 4 replicas, plain batch norm, each replica mines its
  own share (`losses.PerReplicaMining`): tensorflow-similarity 0.17;
* (b) `per_replica_bn`: 4 replicas, plain batch norm, global mining;
* (c) `sync`: 4 replicas, synchronised batch norm, global mining (ours);
* (d) `single`: one device holding the global batch.

(b) - (a) isolates the mining, (c) - (b) the batch norm, (c) - (d) checks
that (c) is what one device would do. (Synchronised batch norm with
per-replica mining is left out: with these batches per-replica mining has no
gradient at all, see below, so it would only repeat (a).)

The model is `benchmark/self_supervised/quality.py`'s small ResNet-style backbone (without its
pooling) under the package's head (`BackboneSim`: average pooling, 64-d
`MetricEmbedding`), at 16x16 on the package's glyphs (default) or at the
digits' 8x8 (`--data digits`). Batches come from a
`MultiShotMemorySampler` of 4 classes a batch, grouped by class as 0.17's
samplers made them, so each replica's share holds a single class: per-replica
mining then finds no negative, every anchor contributes 0, and (a)'s loss is
exactly 0 (never NaN) in every step, which is the point of the regime. Trained
on the training images of the seen classes (glyphs: the 62 Latin letters and
digits; digits: 0-5); evaluated by leave-one-out retrieval (recall@1, mAP@R)
among the held-out test images of the seen classes and among all images of
the unseen classes (glyphs: the Greek and Cyrillic letters, a script never
trained on; digits: 6-9). Before evaluation each trained model's batch-norm
moving statistics are recomputed from the clean seen training images
(`recompute_batch_norm_statistics`, precise BN, as the tfsim jobs do: after
a few hundred steps Keras' 0.99 momentum still weighs the initial mean 0
and variance 1). References: raw pixels and the untrained model of each
seed, evaluated as built. The replicas are logical CPUs of one host.

Results go to `<out>/metric_small_batch.json`, `.md` and `.png` (the paired
differences per seed): `benchmark/results` for a full run, a new temporary
folder (printed) for a `--quick` one. `python -m benchmark.report` adds them to
`REPORT.md`; `small_batch_tables.py` renders them.

Usage (from the repository root):

    python -m benchmark.metric.small_batch            # full run on glyphs, ~15-20 min on 2 cores
    python -m benchmark.metric.small_batch --quick    # smoke run: 2 seeds, 3 steps
    python -m benchmark.metric.small_batch --data digits
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

from benchmark.common import command_line, output_folder  # noqa: E402
from benchmark.metric.losses import PerReplicaMining, retrieval_scores  # noqa: E402
from benchmark.metric.small_batch_tables import (  # noqa: E402
    CLASSES_PER_BATCH,
    NUM_REPLICAS,
    SETTINGS,
    plot_paired_differences,
    render_markdown,
)
from benchmark.self_supervised.quality_training import build_backbone  # noqa: E402
from tensorflow_similarity.architectures import BackboneSim  # noqa: E402
from tensorflow_similarity.datasets import ImageData, load_data  # noqa: E402
from tensorflow_similarity.layers import recompute_batch_norm_statistics  # noqa: E402
from tensorflow_similarity.losses import MultiSimilarityLoss  # noqa: E402
from tensorflow_similarity.samplers import MultiShotMemorySampler  # noqa: E402

NAME = "metric_small_batch"
MODULE = "benchmark.metric.small_batch"
# Image side of each data set: glyphs are legible at 16, the digits are 8x8.
IMAGE_SIZES = {"glyphs": 16, "digits": 8}
WIDTH = 16
EMBEDDING_SIZE = 64
LEARNING_RATE = 0.05
# The digits have no seen/unseen split of their own: 0-5 are seen, 6-9 unseen.
DIGITS_SEEN_CLASSES = 6
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
    parser.add_argument(
        "--data",
        choices=tuple(IMAGE_SIZES),
        default="glyphs",
        help="glyphs (default: Latin seen, Greek and Cyrillic unseen) or digits (0-5 seen)",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 3)")
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (default 40)")
    args = parser.parse_args(argv)
    args.batch_sizes = (2, 4)
    args.seeds = tuple(range(args.seeds if args.seeds is not None else (2 if args.quick else 3)))
    # 120 steps per run keep the 24 trainings near 15 minutes on 2 cores at 16x16.
    args.epochs = args.epochs if args.epochs is not None else (1 if args.quick else 3)
    args.steps = args.steps if args.steps is not None else (3 if args.quick else 40)
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


def build_model(sync_bn: bool, image_size: int) -> keras.Model:
    """The self-supervised benchmark's backbone up to its last feature map, under our head."""
    backbone = build_backbone(image_size, WIDTH)
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
    spec = tf.TensorSpec([None, *model.input_shape[1:]], tf.float32)
    embed = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    return lambda x: embed(tf.constant(x)).numpy()


def split_data(
    data: ImageData, spec: str
) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]], int]:
    """Seen-class training images and labels, the evaluation splits, and the seen-class count.

    Seen classes are labels `0 .. seen - 1`: the glyphs' Latin classes, the digits 0-5.
    The splits: `seen`, the seen classes' test images; `unseen`, every image of the others.
    """
    seen = data.seen_classes if spec == "glyphs" else DIGITS_SEEN_CLASSES
    seen_train = data.y_train < seen
    seen_test = data.y_test < seen
    splits = {
        "seen": (data.x_test[seen_test], data.y_test[seen_test]),
        "unseen": (
            np.concatenate([data.x_train[~seen_train], data.x_test[~seen_test]]),
            np.concatenate([data.y_train[~seen_train], data.y_test[~seen_test]]),
        ),
    }
    return data.x_train[seen_train], data.y_train[seen_train], splits, seen


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

    def __init__(self, setting: str, strategy: tf.distribute.Strategy, image_size: int) -> None:
        replicas, sync_bn, mining = SETTING_SPECS[setting]
        self.setting = setting
        self.strategy = strategy if replicas > 1 else tf.distribute.get_strategy()
        with self.strategy.scope():
            self.model = build_model(sync_bn, image_size)
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
        self,
        reference: keras.Model,
        data: tf.data.Dataset,
        config: argparse.Namespace,
        clean_images: np.ndarray,
    ) -> dict[str, Any]:
        """Trains from `reference`'s weights, then recomputes batch norm's statistics.

        The moving statistics are set from `clean_images` (the training images
        without augmentation), so evaluation sees the network that was trained.
        """
        copy_weights(reference, self.model)
        for variable, value in zip(
            self.model.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            variable.assign(value)
        started = time.perf_counter()
        history = self.model.fit(
            data.repeat(), epochs=config.epochs, steps_per_epoch=config.steps, verbose=0
        )
        recompute_batch_norm_statistics(self.model, clean_images)
        return {
            "losses": [float(v) for v in history.history["loss"]],
            "train_s": round(time.perf_counter() - started, 1),
        }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    config = parse_args(argv[1:])
    strategy = make_strategy()
    out = output_folder(config.out, config.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    image_size = IMAGE_SIZES[config.data]
    data = load_data(config.data, image_size, seed=0)
    x_train, y_train, splits, seen_classes = split_data(data, config.data)
    flat = lambda x: x.reshape(len(x), -1)  # noqa: E731
    payload: dict[str, Any] = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command_line(MODULE, argv[1:]),
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
            "data": config.data,
            "data_source": data.source,
            "image_size": image_size,
            "seen_class_names": [str(n) for n in data.class_names[:seen_classes]],
            "unseen_class_names": [str(n) for n in data.class_names[seen_classes:]],
            "train_images": len(x_train),
            "seen_images": len(splits["seen"][1]),
            "unseen_images": len(splits["unseen"][1]),
            # Trained models: moving statistics recomputed from the clean seen training
            # images before evaluation; the untrained models are evaluated as built.
            "precise_bn": True,
        },
        "raw_pixels": scores(flat, splits),
        "untrained": [],
        "runs": [],
    }
    # Every seed's initial model first: setting TensorFlow's seed clears its kernel cache,
    # which would make each trained model instantiate its 4-replica step again.
    references = {}
    for seed in config.seeds:
        keras.utils.set_random_seed(seed)
        references[seed] = build_model(sync_bn=False, image_size=image_size)
    trainers = {setting: Trainer(setting, strategy, image_size) for setting in SETTINGS}
    print(f"[{time.perf_counter() - started:.0f} s] models built", flush=True)

    def write(complete: bool) -> None:
        payload["meta"]["complete"] = complete
        payload["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
        (out / f"{NAME}.json").write_text(json.dumps(payload, indent=2) + "\n")

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
                row |= trainer.run(reference, data_of_seed, config, x_train)
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
    (out / f"{NAME}.md").write_text(markdown)
    plot_paired_differences(payload, out / f"{NAME}.png")
    print(markdown)
    print(f"Wrote {out / f'{NAME}.md'}, .json and .png", flush=True)
    return payload


if __name__ == "__main__":
    main()
