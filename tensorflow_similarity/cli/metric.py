"""The supervised run of `tfsim train`: metric learning of a `SimilarityModel` on seen classes.

The model trains on the first `--train-classes` classes with class-balanced
batches and a metric loss, then indexes the training images of every class
and is scored on held-out images (see `cli.retrieval`): the unseen classes
show whether what it learnt generalises.

Reproducibility is the self-supervised job's: batch `n` of a run (epoch
`n // steps`, step `n % steps`) is a pure function of `(seed, n)`: its
classes and images are drawn from a NumPy generator seeded by `(seed, n)`
and its augmentation with the augmenter's `step=n`, so a run resumed at
epoch `k` sees exactly the batches the uninterrupted run saw.

Defaults: on glyphs (the default data), the 62 Latin classes are seen and
the 81 Greek and Cyrillic ones unseen; batches of 16 classes x 4 images of
16x16, `GlyphAugmenter`'s warps and stroke widths, Adam at 1e-3 with cosine
decay, 12 epochs (`cli.parser.DATA_DEFAULTS`). On other data: the first 6
classes, SimSiam's augmentations without the flip, SGD at 0.05 (0.005 for
circle and arcface, whose losses scale gradients by a large constant),
momentum 0.9, weight decay 5e-4 (`SUPERVISED_DEFAULTS`). The report puts
the raw pixels' figures (flattened images, searched the same way) beside the
network's before and after training; `benchmark/results/REPORT.md` has the
measured figures.
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
from tensorflow_similarity.cli import report, run_folder, metric_report
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
from tensorflow_similarity.cli.retrieval import RetrievalEvaluation, build_index
from tensorflow_similarity.data import ImageData
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layers import CosineClassifier
from tensorflow_similarity.losses import (
    ArcFaceLoss,
    CircleLoss,
    MultiSimilarityLoss,
    PNLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
)
from tensorflow_similarity.models.index_mixin import index_path

LOSSES: dict[str, Callable[[], keras.losses.Loss]] = {
    "multisimilarity": MultiSimilarityLoss,
    "triplet": TripletLoss,
    "circle": CircleLoss,
    "pn": PNLoss,
    "softnn": SoftNearestNeighborLoss,
    "supcon": SupConLoss,
    # A classification-style loss: trained through a CosineClassifier head of one centre per
    # training class, which the saved embedding model leaves out.
    "arcface": ArcFaceLoss,
}


def balanced_batches(
    labels: np.ndarray,
    classes_per_batch: int,
    examples_per_class: int,
    seed: int,
    first_step: int,
    last_step: int,
) -> np.ndarray:
    """Returns the image indices of batches `first_step` to `last_step - 1`.

    Batch `n` holds `examples_per_class` images of each of
    `classes_per_batch` distinct classes, drawn with
    `np.random.default_rng([seed, n])` (without replacement unless a class
    has fewer images), grouped by class.

    Args:
        labels: The training labels.
        classes_per_batch: Classes in each batch.
        examples_per_class: Images of each class in each batch.
        seed: The run's seed.
        first_step: The first batch (0, or where a resumed run starts).
        last_step: The batch it ends before.

    Returns:
        `[last_step - first_step, classes_per_batch * examples_per_class]` int64 indices.
    """
    classes = np.unique(labels)
    members = {int(c): np.flatnonzero(labels == c) for c in classes}
    batches = np.empty((max(last_step - first_step, 0), classes_per_batch * examples_per_class))
    for row, n in enumerate(range(first_step, last_step)):
        rng = np.random.default_rng([seed, n])
        chosen = rng.choice(classes, size=classes_per_batch, replace=False)
        batches[row] = np.concatenate(
            [
                rng.choice(
                    members[int(c)],
                    size=examples_per_class,
                    replace=len(members[int(c)]) < examples_per_class,
                )
                for c in chosen
            ]
        )
    return batches.astype(np.int64)


def labelled_batches(
    images: np.ndarray,
    labels: np.ndarray,
    indices: np.ndarray,
    first_step: int,
    augmenter: augmenters.ViewAugmenter | None,
    deterministic: bool = True,
) -> tf.data.Dataset:
    """Returns the `(images, labels)` batches of `indices`, augmented with `step=n` if asked.

    Args:
        images: The training images.
        labels: Their labels.
        indices: `balanced_batches`'s output.
        first_step: The run's step of `indices[0]`.
        augmenter: Draws the augmented images (its first view) or `None`.
        deterministic: Whether `tf.data` keeps the batches in order.

    Returns:
        A `tf.data.Dataset` of `(images, labels)` batches.
    """
    pixels = tf.constant(images)
    classes = tf.constant(labels.astype(np.int32))
    steps = tf.range(first_step, first_step + len(indices), dtype=tf.int64)

    def batch(n: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.gather(pixels, rows)
        if augmenter is not None:
            x = augmenter(x, step=n)[0]
        return x, tf.gather(classes, rows)

    return parallel_batches(
        tf.data.Dataset.from_tensor_slices((steps, indices)), batch, deterministic
    )


def train_augmenter(image_size: int, seed: int, data: str) -> augmenters.ViewAugmenter:
    """The augmentations of the training images: no flip (a mirrored character is another).

    Glyphs: `GlyphAugmenter`'s affine warps and stroke widths. Other data:
    SimSiam's augmentations without the flip.
    """
    if data == "glyphs":
        return augmenters.GlyphAugmenter(image_size, seed=seed)
    return augmenters.simsiam_augmenter(image_size, seed=seed, flip_prob=0.0)


def build_models(
    args: argparse.Namespace, train_classes: int, steps_per_epoch: int
) -> tuple[keras.Model, keras.Model]:
    """Returns `(model, trainer)`: the `SimilarityModel` saved, and the model `fit` trains.

    They are one model, except for ArcFace, whose trainer adds a
    `CosineClassifier` head (one centre per training class) to the embedding.
    """
    if args.sync_bn:
        sync_bn = GroupSyncBatchNorm(args.sync_group_size) if args.sync_group_size else True
    else:
        sync_bn = False
    size = args.image_size
    model = BUILDERS[args.backbone](
        (size, size, 3), embedding_size=args.embedding_size, sync_bn=sync_bn
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(args.epochs * steps_per_epoch, 1)
    )
    optimizer = make_optimizer(args.optimizer, schedule)
    if args.algorithm == "arcface":
        centres = CosineClassifier(train_classes, name="class_centres")
        trainer = keras.Model(model.inputs, centres(model.outputs[0]), name="arcface_trainer")
        trainer.compile(optimizer=optimizer, loss=ArcFaceLoss())
        # The saved model's own optimizer is never used: built, so that loading finds the
        # variables it saved.
        model.compile(optimizer=keras.optimizers.Adam(), loss=None, distance="cosine")
        model.optimizer.build(model.trainable_variables)
    else:
        model.compile(optimizer=optimizer, loss=LOSSES[args.algorithm](), distance="cosine")
        trainer = model
    trainer(tf.zeros((1, size, size, 3)))  # built, so that a backup can be loaded into it
    return model, trainer


def check_data(args: argparse.Namespace, data: ImageData) -> None:
    """Raises `UsageError` if the classes or images do not fit the supervised options."""
    if args.train_classes > data.num_classes:
        raise UsageError(
            f"--train-classes {args.train_classes} but {data.source} has "
            f"{data.num_classes} classes; use at most {data.num_classes}."
        )
    seen = data.y_train < args.train_classes
    present = len(np.unique(data.y_train[seen]))
    classes_per_batch = args.classes_per_batch or args.train_classes
    if present < classes_per_batch:
        raise UsageError(
            f"only {present} of the {args.train_classes} training classes have training "
            f"images, fewer than the {classes_per_batch} classes per batch; use more data "
            "(a larger --limit) or a smaller --classes-per-batch."
        )
    if seen.sum() < args.batch_size:
        raise UsageError(
            f"--batch-size {args.batch_size} is larger than the {int(seen.sum())} training "
            f"images of the first {args.train_classes} classes; use a smaller batch or more "
            "data."
        )


def train(
    args: argparse.Namespace,
    plan: DevicePlan,
    data: ImageData,
    output: Path,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> int:
    """Trains, evaluates, indexes and writes the outputs of one supervised run.

    Args:
        args: The checked options.
        plan: The devices, already configured.
        data: The training and test images.
        output: The run's folder.
        callbacks: More Keras callbacks, run after tfsim's own.

    Returns:
        The exit status: 0, or `EXIT_INTERRUPTED` on `KeyboardInterrupt`.

    Raises:
        UsageError: If the classes or the model do not fit the options.
    """
    seen_classes = list(range(args.train_classes))
    seen = np.isin(data.y_train, seen_classes)
    x_seen, y_seen = data.x_train[seen], data.y_train[seen]
    classes_per_batch = args.classes_per_batch or args.train_classes
    steps_per_epoch = len(y_seen) // args.batch_size
    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = make_strategy(args.strategy, plan)
    chief = is_chief(strategy)
    worker_dir = output if chief else output / f"worker-{task_index()}"
    worker_dir.mkdir(parents=True, exist_ok=True)
    backup = EpochBackup(worker_dir / "backup", steps_per_epoch)
    if not args.resume and backup.backup_dir.exists():
        shutil.rmtree(backup.backup_dir)
    try:
        with strategy.scope():
            model, trainer = build_models(args, args.train_classes, steps_per_epoch)
            first_epoch = backup.restore(trainer) if args.resume else 0
    except ValueError as error:
        raise UsageError(str(error)) from None

    indices = balanced_batches(
        y_seen,
        classes_per_batch,
        args.batch_size // classes_per_batch,
        args.seed,
        first_epoch * steps_per_epoch,
        args.epochs * steps_per_epoch,
    )
    augmenter = train_augmenter(args.image_size, args.seed, args.data) if args.augment else None
    dataset = labelled_batches(
        x_seen, y_seen, indices, first_epoch * steps_per_epoch, augmenter, args.deterministic
    )
    embed = inference_function(model)
    evaluation = RetrievalEvaluation(
        embed,
        data.x_train,
        data.y_train,
        data.x_test,
        data.y_test,
        seen_classes,
        None if augmenter is None else augmented_queries(data.x_test, augmenter),
    )
    history_file = output / "history.json"
    records: list[dict[str, Any]] = []
    before = None
    if args.resume and history_file.is_file():
        saved = json.loads(history_file.read_text())
        # History is written before the backup: it may hold one epoch more than the backup.
        records, before = saved.get("epochs", [])[:first_epoch], saved.get("retrieval_before")
    if before is None:
        before = evaluation.evaluate()
    # The reference any embedding should beat: the images' own pixels, searched the same way.
    pixels = RetrievalEvaluation(
        pixel_vectors,
        data.x_train,
        data.y_train,
        data.x_test,
        data.y_test,
        seen_classes,
        evaluation.augmented_query_images,
    ).evaluate()
    if chief:
        report.write_run_file(output, args, plan, class_names=data.class_names)

    timer = report.EpochTimer(steps_per_epoch * args.batch_size)
    recorder = metric_report.RetrievalHistoryWriter(
        history_file if chief else None, records, before, timer
    )
    batch_norm = report.describe_batch_norm(args, plan.replicas)
    if chief:
        print(metric_report.first_line(args, data, len(y_seen), plan, batch_norm, before))
    try:
        fit_epochs(
            trainer,
            dataset,
            args,
            first_epoch,
            steps_per_epoch,
            [
                timer,
                # The trained classes' clean images: the unseen ones stay unseen.
                BatchNormStatistics(model, x_seen),
                evaluation,
                recorder,
                report.ScalarLogger(worker_dir / "logs" / "train"),
                backup,
                *callbacks,
            ],
            chief,
        )
        if not recorder.records:
            raise UsageError("training ran no epoch; nothing to report.")
        if chief:
            index = build_index(embed(data.x_train), data.y_train, data=list(data.x_train))
            model.save(output / "model.keras", save_index=False)
            index.save(index_path(output / "model.keras"))
            summary = metric_report.summary(
                args, plan, recorder.records, before, batch_norm, index.size(), pixels
            )
            report.write_json(output / "summary.json", summary)
            metric_report.plot(
                output,
                recorder.records,
                before,
                index,
                embed(data.x_test),
                data,
                args.train_classes,
            )
            run_folder.finish(output)
        # Last: an interruption before this point can still be resumed.
        shutil.rmtree(backup.backup_dir, ignore_errors=True)
    except KeyboardInterrupt:
        run_folder.print_interrupted(output, backup.epochs_saved)
        return EXIT_INTERRUPTED
    if chief:
        print(metric_report.table(summary))
        print(
            f"tfsim: wrote model.keras, its index {index_path(output / 'model.keras').name}/, "
            f"history.json, logs/ and plots to {output}. Look images up with: tfsim lookup "
            f"--output {output} IMAGE..."
        )
    return 0
