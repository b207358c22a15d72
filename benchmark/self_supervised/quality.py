"""Benchmark of representation quality: per-replica vs synchronised batch norm vs one device.

For SimSiam, SimCLR and Barlow Twins, trains a small ResNet-style backbone
self-supervised under three settings that see exactly the same global batches:

* (a) `per_replica`: 4 replicas (`MirroredStrategy`), plain
  `keras.layers.BatchNormalization`, so every replica normalises its own
  `b` images;
* (b) `sync`: 4 replicas, `sync_bn=True` (every batch norm of the backbone,
  projector and predictor uses the statistics of the global batch `4 b`);
* (c) `single`: one device, the global batch `4 b` in one piece.

The losses gather embeddings across replicas, so (a), (b) and (c) minimise
the same global-batch objective; only the batch-norm statistics differ. For
each seed the three settings start from the same weights and see the same
images, in the same order, with the same augmentations. After training, the
backbone's batch-norm moving statistics are recomputed from the clean
training images (`recompute_batch_norm_statistics`, precise BN, as the tfsim
jobs do: after a short run Keras' 0.99 momentum still weighs the initial
mean 0 and variance 1 heavily), the backbone embeds the (un-augmented)
training and test images and the weighted kNN top-1 accuracy
(`knn_accuracy`, k=20, temperature 0.07) of the test images is recorded.
Results are reported as mean and spread over seeds, next to two references:
kNN on raw pixels and on the untrained backbone, evaluated as built (no
recomputation, as the jobs' "before" figure).

The default data is the package's glyphs (`load_data("glyphs")`: characters
drawn in matplotlib's fonts, every class, held-out fonts as queries), on
which raw pixels leave room for learning; `--data digits` runs the
scikit-learn digits of the earlier reports.

The replicas are logical CPU devices carved out of the host (4 of them), so
this measures what the statistics do to learning, not speed.

The cells and their tables are defined in `quality_tables.py`. Results go to
`<out>/ssl_quality.md` and `<out>/ssl_quality.json`: `benchmark/results`
for a full run, a new temporary folder (printed) for a `--quick` one, so that a
smoke run never replaces the full results; `--out` chooses the folder either way.
`python -m benchmark.report` turns the JSON into plots and `benchmark/results/REPORT.md`.

Usage (from the repository root):

    python -m benchmark.self_supervised.quality          # full run on glyphs, ~20 min on 2 cores
    python -m benchmark.self_supervised.quality --quick  # smoke run, under 2 minutes
    python -m benchmark.self_supervised.quality --data digits --epochs 8
    python -m benchmark.self_supervised.quality --data path/to/class_folders --image-size 32
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Importing these creates no TensorFlow context, so the logical devices can
# still be configured in main().
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import command_line, output_folder  # noqa: E402
from benchmark.self_supervised.quality_tables import (  # noqa: E402
    ALGORITHMS,
    KNN_K,
    KNN_TEMPERATURE,
    NUM_REPLICAS,
    SETTINGS,
    render_markdown,
)
from tensorflow_similarity import augmenters  # noqa: E402
from tensorflow_similarity.augmenters import ViewAugmenter  # noqa: E402
from tensorflow_similarity.callbacks import knn_accuracy  # noqa: E402
from tensorflow_similarity.datasets import ImageData, check_data_spec, load_data  # noqa: E402
from tensorflow_similarity.layers import recompute_batch_norm_statistics  # noqa: E402
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model  # noqa: E402

MODULE = "benchmark.self_supervised.quality"
# Three epochs of the glyphs' 2,140 training images keep the full run (54 trainings) near
# 20 minutes on 2 cores.
DEFAULT_EPOCHS = 3
AUGMENTERS = {
    "simsiam": augmenters.simsiam_augmenter,
    "simclr": augmenters.simclr_augmenter,
    "barlow": augmenters.barlow_augmenter,
}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one invocation trains, derived from the command line."""

    data: str
    image_size: int
    width: int
    epochs: int
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    algorithms: tuple[str, ...]
    limit: int | None
    learning_rate: float
    projector_dim: int
    quick: bool


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "kNN accuracy of SimSiam, SimCLR and Barlow Twins with per-replica batch norm, "
            "synchronised batch norm, and one device holding the global batch."
        )
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run: SimCLR only, 1 seed, 1 epoch, 256 images, batch 8; under 2 minutes.",
    )
    parser.add_argument(
        "--data",
        default="glyphs",
        help="'glyphs' (the package's, default), 'digits' (scikit-learn), a folder with one "
        "sub-folder of images per class, or 'tfds:NAME' (as the tfsim command).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=(
            "Folder for ssl_quality.md and ssl_quality.json (default: benchmark/results; with "
            "--quick, a new temporary folder)."
        ),
    )
    parser.add_argument("--image-size", type=int, default=16, help="Image side (default: 16).")
    parser.add_argument(
        "--width", type=int, default=16, help="Channels of the backbone's first stage (16)."
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help=f"Epochs (default: {DEFAULT_EPOCHS})."
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=None,
        help="Per-replica batch sizes (default: 8 32).",
    )
    parser.add_argument("--seeds", type=int, default=None, help="Number of seeds (default: 3).")
    parser.add_argument(
        "--algorithms",
        nargs="+",
        choices=ALGORITHMS,
        default=None,
        help="Algorithms to train (default: all three).",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="Use at most this many images (default: all)."
    )
    parser.add_argument(
        "--learning-rate", type=float, default=2e-3, help="Adam learning rate (default: 2e-3)."
    )
    return parser.parse_args(argv)


def run_config(args: argparse.Namespace) -> RunConfig:
    """Resolves the command line into a `RunConfig`, rejecting bad values before any work.

    Raises:
        SystemExit: With a message naming the bad option and what to pass instead.
    """
    quick = args.quick
    config = RunConfig(
        data=args.data,
        image_size=args.image_size,
        width=args.width,
        epochs=args.epochs if args.epochs is not None else (1 if quick else DEFAULT_EPOCHS),
        batch_sizes=tuple(args.batch_sizes or ((8,) if quick else (8, 32))),
        seeds=tuple(range(args.seeds if args.seeds is not None else (1 if quick else 3))),
        # One algorithm keeps the smoke run to three traced models; SimCLR is the one the
        # literature expects per-replica statistics to hurt most.
        algorithms=tuple(args.algorithms or (("simclr",) if quick else ALGORITHMS)),
        limit=args.limit if args.limit is not None else (256 if quick else None),
        learning_rate=args.learning_rate,
        projector_dim=64,
        quick=quick,
    )
    for name, value, low in (
        ("--image-size", config.image_size, 8),
        ("--width", config.width, 1),
        ("--epochs", config.epochs, 1),
        ("--seeds", len(config.seeds), 1),
    ):
        if value < low:
            raise SystemExit(f"{name} must be at least {low}; got {value}.")
    if any(b < 2 for b in config.batch_sizes):
        # Batch norm and the losses need at least 2 samples per replica.
        raise SystemExit(f"--batch-sizes must all be at least 2; got {list(config.batch_sizes)}.")
    if not config.learning_rate > 0:
        raise SystemExit(f"--learning-rate must be positive; got {config.learning_rate}.")
    return config


def configure_devices() -> list[str]:
    """Splits the host CPU into `NUM_REPLICAS` logical devices; must run before TF initialises."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS
    )
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(devices: Sequence[str]) -> tf.distribute.MirroredStrategy:
    # A key range of its own, as in benchmark.sync_bn, so that nothing else
    # in the process can collide with its collective keys.
    cls = type(
        "QualityMirroredStrategy",
        (tf.distribute.MirroredStrategy,),
        {"_collective_key_base": 10_000 * NUM_REPLICAS},
    )
    return cls(list(devices[:NUM_REPLICAS]))


_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", flush=True)


# --------------------------------------------------------------------------------------
# Models and data.
# --------------------------------------------------------------------------------------


def build_backbone(image_size: int, width: int) -> keras.Model:
    """A ResNet-style backbone small enough for CPU: 3 stages of one basic block each.

    Stem conv, then basic blocks of `width`, `2 width`, `4 width` channels
    (strides 1, 2, 2), global average pooling: representation of `4 width`
    features, 9 batch-norm layers.
    """
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = keras.layers.BatchNormalization(name="stem_bn")(x)
    x = keras.layers.ReLU(name="stem_relu")(x)
    for stage, (filters, stride) in enumerate(((width, 1), (2 * width, 2), (4 * width, 2))):
        prefix = f"stage{stage}"
        shortcut = x
        if stride != 1 or x.shape[-1] != filters:
            shortcut = keras.layers.Conv2D(
                filters, 1, strides=stride, use_bias=False, name=f"{prefix}_proj_conv"
            )(x)
            shortcut = keras.layers.BatchNormalization(name=f"{prefix}_proj_bn")(shortcut)
        y = keras.layers.Conv2D(
            filters, 3, strides=stride, padding="same", use_bias=False, name=f"{prefix}_conv1"
        )(x)
        y = keras.layers.BatchNormalization(name=f"{prefix}_bn1")(y)
        y = keras.layers.ReLU(name=f"{prefix}_relu1")(y)
        y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{prefix}_conv2")(
            y
        )
        y = keras.layers.BatchNormalization(name=f"{prefix}_bn2")(y)
        x = keras.layers.ReLU(name=f"{prefix}_relu2")(keras.layers.Add()([shortcut, y]))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, x, name="small_resnet")


def build_model(algorithm: str, config: RunConfig, sync_bn: bool) -> ContrastiveModel:
    return create_contrastive_model(
        build_backbone(config.image_size, config.width),
        algorithm,
        projector_hidden_dim=2 * config.projector_dim,
        projector_output_dim=config.projector_dim,
        sync_bn=sync_bn,
    )


def sub_models(model: ContrastiveModel) -> list[keras.Model]:
    return [m for m in (model.backbone, model.projector, model.predictor) if m is not None]


def copy_weights(source: ContrastiveModel, target: ContrastiveModel) -> None:
    """Copies every layer's weights by layer name (conversion keeps the names).

    Raises:
        ValueError: If a layer's weights differ in number or shape.
    """
    for source_model, target_model in zip(sub_models(source), sub_models(target), strict=True):
        for layer in source_model.layers:
            weights = layer.get_weights()
            if weights:
                target_model.get_layer(layer.name).set_weights(weights)


def make_augmenter(algorithm: str, image_size: int, seed: int) -> ViewAugmenter:
    # Characters are not mirror-symmetric (a mirrored letter is another letter), and a
    # 16-pixel image cannot lose 92% of its area and stay legible: no flips, crops keep at
    # least 25% of the area.
    # Colour and blur stay as in the papers.
    return AUGMENTERS[algorithm](image_size, seed=seed, flip_prob=0.0, crop_scale=(0.25, 1.0))


def batch_order(num_images: int, global_batch: int, epochs: int, seed: int) -> np.ndarray:
    """Image indices of every step, `[epochs * steps, global_batch]`, the same for a/b/c."""
    rng = np.random.default_rng(seed)
    steps = num_images // global_batch
    return np.stack(
        [rng.permutation(num_images)[: steps * global_batch] for _ in range(epochs)]
    ).reshape(-1, global_batch)


def view_pairs(images: np.ndarray, order: np.ndarray, augmenter: ViewAugmenter) -> tf.data.Dataset:
    """Global batches of `(view1, view2)`, a pure function of `order` and the augmenter seed.

    `step=i` makes batch `i`'s views independent of when the pipeline runs them.
    """
    images = tf.constant(images)
    _, height, width, channels = images.shape

    def views(i, indices):
        view1, view2 = augmenter(tf.gather(images, indices), step=i)
        # An unknown batch dimension lets one traced training step serve every
        # batch size, instead of one trace per size.
        loose = [None, height, width, channels]
        return tuple(tf.compat.v1.placeholder_with_default(v, loose) for v in (view1, view2))

    return (
        tf.data.Dataset.from_tensor_slices(order)
        .enumerate()
        .map(views, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(2)
    )


def embedding_function(backbone: keras.Model, image_size: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """Backbone inference on one device, traced once for any number of images."""
    spec = tf.TensorSpec([None, image_size, image_size, 3], tf.float32)
    return tf.function(lambda x: backbone(x, training=False), input_signature=[spec])


def evaluate(embed: Callable[[tf.Tensor], tf.Tensor], data: ImageData) -> float:
    train = embed(tf.constant(data.x_train)).numpy()
    test = embed(tf.constant(data.x_test)).numpy()
    return knn_accuracy(
        train, data.y_train, test, data.y_test, k=KNN_K, temperature=KNN_TEMPERATURE
    )


# --------------------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------------------


class Trainer:
    """One compiled model per (algorithm, setting), reset to a seed's weights before each run.

    Tracing a 4-replica training step costs far more than the training
    itself at these sizes, so the model, its optimizer and its traced
    functions are kept across seeds and batch sizes: each run copies the
    seed's initial weights in and puts back the optimizer's state as built
    (zero moments and iteration count; the learning rate, also one of the
    optimizer's variables, kept), which is what a freshly built model would
    start from.
    """

    def __init__(
        self, algorithm: str, setting: str, config: RunConfig, strategy: tf.distribute.Strategy
    ) -> None:
        self.algorithm = algorithm
        self.setting = setting
        self.config = config
        self.replicas = 1 if setting == "single" else NUM_REPLICAS
        self.strategy = tf.distribute.get_strategy() if setting == "single" else strategy
        with self.strategy.scope():
            self.model = build_model(algorithm, config, sync_bn=setting == "sync")
            # XLA is off on CPU and under tf.distribute anyway; off everywhere keeps the
            # three settings' numerics comparable on a GPU host too.
            self.model.compile(
                optimizer=keras.optimizers.Adam(config.learning_rate),
                jit_compile=False,
            )
            self.model.optimizer.build(self.model.trainable_variables)
        self.fresh_optimizer = [v.numpy() for v in self.model.optimizer.variables]
        self.embed = embedding_function(self.model.backbone, config.image_size)

    def run(
        self, batch_per_replica: int, seed: int, reference: ContrastiveModel, data: ImageData
    ) -> dict[str, Any]:
        """Trains from `reference`'s weights and returns the run's row of results."""
        config = self.config
        global_batch = NUM_REPLICAS * batch_per_replica
        order = batch_order(len(data.x_train), global_batch, config.epochs, seed)
        steps_per_epoch = len(order) // config.epochs
        augmenter = make_augmenter(self.algorithm, config.image_size, seed)
        dataset = view_pairs(data.x_train, order, augmenter)
        copy_weights(reference, self.model)
        for variable, value in zip(
            self.model.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            variable.assign(value)
        started = time.perf_counter()
        history = self.model.fit(
            dataset, epochs=config.epochs, steps_per_epoch=steps_per_epoch, verbose=0
        )
        train_s = time.perf_counter() - started
        recompute_batch_norm_statistics(self.model.backbone, data.x_train)
        accuracy = evaluate(self.embed, data)
        row = {
            "algorithm": self.algorithm,
            "setting": self.setting,
            "batch_per_replica": batch_per_replica,
            "global_batch": global_batch,
            "replicas": self.replicas,
            "seed": seed,
            "knn_accuracy": accuracy,
            "final_loss": float(history.history["loss"][-1]),
            "final_proj_std": float(history.history["proj_std"][-1]),
            "steps": len(order),
            "train_s": round(train_s, 1),
        }
        log(
            f"{self.algorithm:8s} {self.setting:11s} b={batch_per_replica:<3d} seed={seed} "
            f"knn={accuracy:.4f} loss={row['final_loss']:.4f} ({train_s:.0f} s)"
        )
        return row


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, sample standard deviation, min and max of the kNN accuracy per cell.

    Also the paired differences `(a) - (c)` and `(b) - (c)` per seed (same
    initial weights and data), which cancel most of the seed-to-seed noise.
    """
    cells: dict[tuple[str, int, str], dict[int, float]] = {}
    for run in runs:
        key = (run["algorithm"], run["batch_per_replica"], run["setting"])
        cells.setdefault(key, {})[run["seed"]] = run["knn_accuracy"]
    rows = []
    for (algorithm, batch, setting), by_seed in cells.items():
        values = list(by_seed.values())
        row = {
            "algorithm": algorithm,
            "batch_per_replica": batch,
            "setting": setting,
            "n": len(values),
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values),
            "max": max(values),
        }
        single = cells.get((algorithm, batch, "single"), {})
        differences = [by_seed[s] - single[s] for s in by_seed if s in single]
        if setting != "single" and differences:
            row["diff_vs_single_mean"] = statistics.fmean(differences)
            row["diff_vs_single_std"] = (
                statistics.stdev(differences) if len(differences) > 1 else 0.0
            )
        rows.append(row)
    return rows


def metadata(
    config: RunConfig,
    argv: Sequence[str],
    data: ImageData,
    reference: ContrastiveModel,
    module: str = MODULE,
) -> dict[str, Any]:
    backbone = reference.backbone
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(module, argv[1:]),
        "hardware": (
            f"{NUM_REPLICAS} logical CPU devices on {os.cpu_count()} CPU cores "
            f"({platform.processor() or platform.machine()})"
        ),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "data_source": data.source,
        "train_images": len(data.x_train),
        "test_images": len(data.x_test),
        "backbone_params": backbone.count_params(),
        "backbone_batch_norm_layers": sum(
            isinstance(layer, keras.layers.BatchNormalization) for layer in backbone.layers
        ),
        "replicas": NUM_REPLICAS,
        # Trained backbones: moving statistics recomputed from the clean training images
        # before evaluation; the untrained backbone is evaluated as built.
        "precise_bn": True,
        "config": dataclasses.asdict(config),
    }


def main(
    argv: Sequence[str] | None = None,
    name: str = "ssl_quality",
    module: str = MODULE,
    forwarded: Sequence[str] = (),
) -> dict[str, Any]:
    """Trains every cell and writes `<out>/<name>.md` and `<out>/<name>.json`.

    Args:
        argv: The command line, `sys.argv` by default; recorded as the command.
        name: The results' name: `ssl_quality`, or `ssl_small_batch` for
            `benchmark.self_supervised.small_batch`, which presets some options.
        module: The benchmark module run by the user, recorded in the command.
        forwarded: Options parsed before `argv[1:]` (the presets, which the
            command line may override), not recorded in the command.
    """
    argv = list(sys.argv if argv is None else argv)
    args = parse_args([*forwarded, *argv[1:]])
    config = run_config(args)
    try:
        check_data_spec(config.data)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    # Loading resizes with TensorFlow, which fixes the devices: configure them first.
    devices = configure_devices()
    try:
        data = load_data(config.data, image_size=config.image_size, seed=0, limit=config.limit)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    strategy = make_strategy(devices)
    out = output_folder(args.out, config.quick, name)
    started = time.perf_counter()
    log(
        f"{data.source}: {len(data.x_train)} train / {len(data.x_test)} test images; "
        f"{len(config.algorithms)} algorithms x {len(config.batch_sizes)} batch sizes x "
        f"{len(SETTINGS)} settings x {len(config.seeds)} seeds"
    )

    flat = lambda x: x.reshape(len(x), -1)  # noqa: E731
    baselines = [
        {
            "name": "raw pixels",
            "knn_accuracy": knn_accuracy(
                flat(data.x_train), data.y_train, flat(data.x_test), data.y_test, k=KNN_K
            ),
        }
    ]
    references = {}
    for seed in config.seeds:
        for algorithm in config.algorithms:
            keras.utils.set_random_seed(seed)
            references[algorithm, seed] = build_model(algorithm, config, sync_bn=False)
        baselines.append(
            {
                "name": "untrained backbone",
                "seed": seed,
                "knn_accuracy": evaluate(
                    embedding_function(
                        references[config.algorithms[0], seed].backbone, config.image_size
                    ),
                    data,
                ),
            }
        )
    reference_meta = metadata(
        config, argv, data, references[config.algorithms[0], config.seeds[0]], module
    )
    out.mkdir(parents=True, exist_ok=True)

    def write(runs: list[dict[str, Any]], complete: bool) -> dict[str, Any]:
        report = {
            "meta": {
                **reference_meta,
                "complete": complete,
                "elapsed_s": round(time.perf_counter() - started, 1),
            },
            "baselines": baselines,
            "runs": runs,
            "summary": summarise(runs),
        }
        (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    # Seed-major, with every trainer kept: a run stopped early still holds whole seeds
    # of every cell, and each model is traced once.
    trainers: dict[tuple[str, str], Trainer] = {}
    runs = []
    for seed in config.seeds:
        for algorithm in config.algorithms:
            for setting in SETTINGS:
                if (algorithm, setting) not in trainers:
                    trainers[algorithm, setting] = Trainer(algorithm, setting, config, strategy)
                for batch in config.batch_sizes:
                    runs.append(
                        trainers[algorithm, setting].run(
                            batch, seed, references[algorithm, seed], data
                        )
                    )
        write(runs, complete=False)

    report = write(runs, complete=True)
    markdown = render_markdown(report)
    print()
    print(markdown)
    (out / f"{name}.md").write_text(markdown)
    print(f"Wrote {out / f'{name}.md'} and {out / f'{name}.json'}")
    return report


if __name__ == "__main__":
    main()
