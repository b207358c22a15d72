"""The training run of `tfsim train`: model, views, backup and `fit`.

Reproducibility: batch `n` of a run (epoch `n // steps`, step `n % steps`)
is a pure function of `(seed, n)`: its images are a slice of a stateless
permutation seeded by `(seed, epoch)` and its views are drawn with the
augmenter's `step=n`. No random state is carried from one epoch to the next,
so a run resumed at epoch `k` sees exactly the batches it would have seen,
and with TensorFlow's op determinism (`--deterministic`) ends with the same
weights as the uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import augmenters
from tensorflow_similarity.architectures.registry import BUILDERS
from tensorflow_similarity.callbacks import KNNAccuracy
from tensorflow_similarity.cli import report, run_folder
from tensorflow_similarity.cli.devices import DevicePlan, is_chief, make_strategy, task_index
from tensorflow_similarity.cli.fitting import (
    BatchNormStatistics,
    EpochBackup,
    augmented_queries,
    fit_epochs,
    inference_function,
    make_optimizer,
    parallel_batches,
    pixel_vectors,
)
from tensorflow_similarity.cli.parser import EXIT_INTERRUPTED, UsageError
from tensorflow_similarity.data import ImageData
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.models import create_contrastive_model

AUGMENTERS: dict[str, Callable[..., augmenters.ViewAugmenter]] = {
    "simsiam": augmenters.simsiam_augmenter,
    "simclr": augmenters.simclr_augmenter,
    "barlow": augmenters.barlow_augmenter,
    # VICReg trains on Barlow Twins' views (Bardes et al., 2022, appendix C).
    "vicreg": augmenters.barlow_augmenter,
}


def view_augmenter(args: argparse.Namespace) -> augmenters.ViewAugmenter:
    """The views of a run: its algorithm's paper's, or `GlyphAugmenter`'s for glyphs.

    Crops, flips and colour jitter suit photographs; a glyph's views are
    affine warps and stroke widths (a mirrored letter is another letter).
    """
    if args.data == "glyphs":
        return augmenters.GlyphAugmenter(args.image_size, seed=args.seed)
    return AUGMENTERS[args.algorithm](args.image_size, seed=args.seed)


def view_batches(
    images: np.ndarray,
    augmenter: augmenters.ViewAugmenter,
    batch_size: int,
    seed: int,
    first_epoch: int,
    epochs: int,
    deterministic: bool = True,
) -> tf.data.Dataset:
    """Returns the view pairs of epochs `first_epoch` to `epochs - 1`.

    Each epoch is `len(images) // batch_size` batches of a fresh permutation
    (the last partial batch is dropped); batch `n` of the run is a pure
    function of `(seed, n)`, wherever the dataset starts.

    Args:
        images: `[count, height, width, channels]` training images.
        augmenter: Makes the two views of a batch; called with `step=n`.
        batch_size: Global batch size.
        seed: Seed of the permutations (the augmenter has its own).
        first_epoch: The epoch the dataset starts at (0, or a resumed one).
        epochs: The epoch it ends before.
        deterministic: Whether `tf.data` keeps the batches in order (when
            `False`, parallel map calls may deliver batches out of order).

    Returns:
        A `tf.data.Dataset` of `(view1, view2)` pairs of `batch_size` images.
    """
    count = len(images)
    steps = count // batch_size
    pixels = tf.constant(images)

    def batch(n: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        epoch_seed = tf.stack([tf.constant(seed, tf.int64), n // steps])
        order = tf.random.experimental.stateless_shuffle(tf.range(count), seed=epoch_seed)
        indices = tf.slice(order, [tf.cast(n % steps, tf.int32) * batch_size], [batch_size])
        return augmenter(tf.gather(pixels, indices), step=n)

    return parallel_batches(
        tf.data.Dataset.range(first_epoch * steps, epochs * steps), batch, deterministic
    )


def _build_model(args: argparse.Namespace, steps_per_epoch: int) -> keras.Model:
    if args.sync_bn:
        sync_bn = GroupSyncBatchNorm(args.sync_group_size) if args.sync_group_size else True
    else:
        sync_bn = False
    size = args.image_size
    backbone = BUILDERS[args.backbone](
        (size, size, 3), include_top=False, pooling="avg", sync_bn=sync_bn
    )
    model = create_contrastive_model(
        backbone,
        args.algorithm,
        projector_hidden_dim=args.projector_dim,
        projector_output_dim=args.projector_dim,
        predictor_hidden_dim=max(args.projector_dim // 4, 1),
        sync_bn=sync_bn,
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(args.epochs * steps_per_epoch, 1)
    )
    model.compile(optimizer=make_optimizer(args.optimizer, schedule))
    model(tf.zeros((1, size, size, 3)))  # built, so that a backup can be loaded into it
    return model


def train(
    args: argparse.Namespace,
    plan: DevicePlan,
    data: ImageData,
    output: Path,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> int:
    """Trains, evaluates and writes the outputs of one run.

    Args:
        args: The checked options.
        plan: The devices, already configured.
        data: The training and test images.
        output: The run's folder.
        callbacks: More Keras callbacks, run after tfsim's own (the backup
            of an epoch is written before they see its end).

    Returns:
        The exit status: 0, or `EXIT_INTERRUPTED` on `KeyboardInterrupt`
        (Ctrl-C, or SIGTERM as `main` maps it) during training or writing.

    Raises:
        UsageError: If the model cannot be built from the options.
    """
    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = make_strategy(args.strategy, plan)
    chief = is_chief(strategy)
    worker_dir = output if chief else output / f"worker-{task_index()}"
    worker_dir.mkdir(parents=True, exist_ok=True)
    steps_per_epoch = len(data.y_train) // args.batch_size
    backup = EpochBackup(worker_dir / "backup", steps_per_epoch)
    if not args.resume and backup.backup_dir.exists():
        shutil.rmtree(backup.backup_dir)
    try:
        with strategy.scope():
            model = _build_model(args, steps_per_epoch)
            first_epoch = backup.restore(model) if args.resume else 0
    except ValueError as error:
        raise UsageError(str(error)) from None

    augmenter = view_augmenter(args)
    dataset = view_batches(
        data.x_train,
        augmenter,
        args.batch_size,
        args.seed,
        first_epoch,
        args.epochs,
        deterministic=args.deterministic,
    )
    embed = inference_function(model.backbone)
    knn = KNNAccuracy(
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        k=min(20, len(data.y_train)),
        embedding_fn=embed,
    )
    knn_augmented = KNNAccuracy(
        (data.x_train, data.y_train),
        (augmented_queries(data.x_test, augmenter), data.y_test),
        k=knn.k,
        embedding_fn=embed,
        name="knn_accuracy_augmented",
    )
    history_file = output / "history.json"
    records: list[dict[str, Any]] = []
    knn_before = knn_augmented_before = None
    if args.resume and history_file.is_file():
        saved = json.loads(history_file.read_text())
        # History is written before the backup: it may hold one epoch more than the backup.
        records, knn_before, knn_augmented_before = (
            saved.get("epochs", [])[:first_epoch],
            saved.get("knn_accuracy_before"),
            saved.get("knn_accuracy_augmented_before"),
        )
    if knn_before is None:
        knn_before = knn.evaluate()
    # The reference training should beat: the raw pixels' kNN accuracy.
    knn_pixels = KNNAccuracy(
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        k=knn.k,
        embedding_fn=pixel_vectors,
    ).evaluate()
    if knn_augmented_before is None:
        knn_augmented_before = knn_augmented.evaluate()
    if chief:
        report.write_run_file(output, args, plan)

    timer = report.EpochTimer(steps_per_epoch * args.batch_size)
    recorder = report.HistoryWriter(
        history_file if chief else None,
        records,
        knn_before,
        timer,
        knn_augmented_before=knn_augmented_before,
    )
    batch_norm = report.describe_batch_norm(args, plan.replicas)
    if chief:
        size = args.image_size
        print(
            f"tfsim: {args.algorithm} with {args.backbone} on {data.source}: "
            f"{len(data.y_train)} train / {len(data.y_test)} test images at {size}x{size}; "
            f"{plan.replicas} replicas ({args.strategy}), batch norm {batch_norm}; "
            f"kNN accuracy before training {knn_before:.3f} "
            f"(augmented queries {knn_augmented_before:.3f}; raw pixels {knn_pixels:.3f})",
            flush=True,
        )
    try:
        fit_epochs(
            model,
            dataset,
            args,
            first_epoch,
            steps_per_epoch,
            [
                timer,
                BatchNormStatistics(model.backbone, data.x_train),
                knn,
                knn_augmented,
                recorder,
                report.ScalarLogger(worker_dir / "logs" / "train"),
                backup,
                *callbacks,
            ],
            chief,
        )
        if not recorder.records:
            raise UsageError("training ran no epoch; nothing to report.")
        embeddings = embed(data.x_test)
        if chief:
            model.save(output / "model.keras")
            summary = report.summary(
                args,
                plan,
                recorder.records,
                knn_before,
                batch_norm,
                knn_augmented_before=knn_augmented_before,
                knn_pixels=knn_pixels,
            )
            report.write_json(output / "summary.json", summary)
            report.plot(
                output,
                recorder.records,
                knn_before,
                embeddings,
                data.y_test,
                data.class_names,
                knn_augmented_before=knn_augmented_before,
            )
            run_folder.finish(output)
        # Last: an interruption before this point can still be resumed.
        shutil.rmtree(backup.backup_dir, ignore_errors=True)
    except KeyboardInterrupt:
        run_folder.print_interrupted(output, backup.epochs_saved)
        return EXIT_INTERRUPTED
    if chief:
        print(report.table(summary))
        print(f"tfsim: wrote model.keras, history.json, logs/ and plots to {output}")
    return 0
