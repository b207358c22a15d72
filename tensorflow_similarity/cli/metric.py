"""The metric-learning job (`tfsim train-metric`): a `SimilarityModel` trained on seen classes.

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
decay, 12 epochs (`cli.defaults.DATA_DEFAULTS`). On other data: the first 6
classes, SimSiam's augmentations without the flip, SGD at 0.05 (0.005 for
circle and arcface, whose losses scale gradients by a large constant),
momentum 0.9, weight decay 5e-4 (`SUPERVISED_DEFAULTS`). The report puts
the raw pixels' figures (flattened images, searched the same way) beside the
network's before and after training; `benchmark/results/REPORT.md` has the
measured figures.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import augmenters
from tensorflow_similarity.architectures.registry import BUILDERS
from tensorflow_similarity.cli import fitting, metric_report
from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.disk_full import disk_full_is_usage_error
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.retrieval import RetrievalEvaluation, build_index
from tensorflow_similarity.cli.run import Job
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.layers import CosineClassifier
from tensorflow_similarity.losses import (
    ArcFaceLoss,
    CircleLoss,
    MultiSimilarityLoss,
    PNLoss,
    ProxyAnchorLoss,
    ProxyNCALoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
)
from tensorflow_similarity.models.index_mixin import index_path

LOSSES: dict[str, Callable[..., keras.losses.Loss]] = {
    "multisimilarity": MultiSimilarityLoss,
    "triplet": TripletLoss,
    "circle": CircleLoss,
    "pn": PNLoss,
    "softnn": SoftNearestNeighborLoss,
    "supcon": SupConLoss,
    # A classification-style loss: trained through a CosineClassifier head of one centre per
    # training class, which the saved embedding model leaves out.
    "arcface": ArcFaceLoss,
    # Proxy losses: one trained proxy per training class, of the embedding's size (`metric_loss`).
    "proxyanchor": ProxyAnchorLoss,
    "proxynca": ProxyNCALoss,
}
PROXY_LOSSES = ("proxyanchor", "proxynca")


def metric_loss(args: argparse.Namespace, train_classes: int) -> keras.losses.Loss:
    """Returns the loss of `--algorithm`; a proxy loss gets one proxy per training class."""
    if args.algorithm in PROXY_LOSSES:
        return LOSSES[args.algorithm](num_classes=train_classes, embedding_size=args.embedding_size)
    return LOSSES[args.algorithm]()


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

    return fitting.parallel_batches(
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
    sync_bn = fitting.sync_bn_policy(args)
    size = args.image_size
    model = BUILDERS[args.backbone](
        (size, size, 3),
        embedding_size=args.embedding_size,
        sync_bn=sync_bn,
        **fitting.width_argument(args),
    )
    optimizer = fitting.scheduled_optimizer(args, steps_per_epoch)
    if args.algorithm == "arcface":
        centres = CosineClassifier(train_classes, name="class_centres")
        trainer = keras.Model(model.inputs, centres(model.outputs[0]), name="arcface_trainer")
        trainer.compile(optimizer=optimizer, loss=ArcFaceLoss())
        # The saved model's own optimizer is never used: built, so that loading finds the
        # variables it saved.
        model.compile(optimizer=keras.optimizers.Adam(), loss=None, distance="cosine")
        model.optimizer.build(model.trainable_variables)
    else:
        loss = metric_loss(args, train_classes)
        model.compile(optimizer=optimizer, loss=loss, distance="cosine")
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


class MetricJob(Job):
    """Supervised metric learning of a `SimilarityModel` (`tfsim train-metric`).

    Trains on the first `--train-classes` classes, indexes the training
    images of every class, and scores the held-out images (`retrieval`):
    recall@1 and mAP@R before training and after each epoch, seen and unseen
    classes apart, beside the raw pixels'.
    """

    def __init__(self, args: argparse.Namespace, plan: DevicePlan, data: ImageData) -> None:
        super().__init__(args, plan, data)
        self.seen_classes = list(range(args.train_classes))
        seen = np.isin(data.y_train, self.seen_classes)
        self.x_seen, self.y_seen = data.x_train[seen], data.y_train[seen]
        self.pixels: dict[str, float] = {}

    check_data = staticmethod(check_data)

    @property
    def train_images(self) -> np.ndarray:
        # The trained classes' clean images: the unseen ones stay unseen.
        return self.x_seen

    @property
    def network(self) -> keras.Model:
        return self.model

    def build(self, steps_per_epoch: int) -> keras.Model:
        self.model, trainer = build_models(self.args, self.args.train_classes, steps_per_epoch)
        return trainer

    def batches(self, first_epoch: int, steps_per_epoch: int) -> tf.data.Dataset:
        args = self.args
        classes_per_batch = args.classes_per_batch or args.train_classes
        indices = balanced_batches(
            self.y_seen,
            classes_per_batch,
            args.batch_size // classes_per_batch,
            args.seed,
            first_epoch * steps_per_epoch,
            args.epochs * steps_per_epoch,
        )
        self.augmenter = (
            train_augmenter(args.image_size, args.seed, args.data) if args.augment else None
        )
        return labelled_batches(
            self.x_seen,
            self.y_seen,
            indices,
            first_epoch * steps_per_epoch,
            self.augmenter,
            args.deterministic,
        )

    def evaluations(self) -> list[keras.callbacks.Callback]:
        data = self.data
        self.embed = fitting.inference_function(self.model)
        augmented = None
        if self.augmenter is not None:
            augmented = fitting.augmented_queries(data.x_test, self.augmenter)
        self.evaluation = RetrievalEvaluation(
            self.embed,
            data.x_train,
            data.y_train,
            data.x_test,
            data.y_test,
            self.seen_classes,
            augmented,
        )
        return [self.evaluation]

    def figures_before(self, saved: dict[str, Any]) -> dict[str, Any]:
        data = self.data
        before = saved.get("retrieval_before")
        if before is None:
            before = self.evaluation.evaluate()
        # The reference any embedding should beat: the images' own pixels, searched the same way.
        self.pixels = RetrievalEvaluation(
            fitting.pixel_vectors,
            data.x_train,
            data.y_train,
            data.x_test,
            data.y_test,
            self.seen_classes,
            self.evaluation.augmented_query_images,
        ).evaluate()
        return {"retrieval_before": before}

    def run_file_extra(self) -> dict[str, Any]:
        return {"class_names": self.data.class_names}

    def first_line(self, before: dict[str, Any], batch_norm: str) -> str:
        return metric_report.first_line(
            self.args,
            self.data,
            len(self.y_seen),
            self.plan,
            batch_norm,
            before["retrieval_before"],
        )

    def save(self, output: Path) -> None:
        data = self.data
        self.index = build_index(self.embed(data.x_train), data.y_train, data=list(data.x_train))
        # Saved as the model's index, so that the pair is switched in together, with the
        # fingerprint of the weights that made it (see IndexMixin).
        self.index.embedding_fingerprint = self.model._embedding_fingerprint()
        self.model._index = self.index
        with disk_full_is_usage_error():
            self.model.save(output / "model.keras")

    def summary(self, records: list[dict[str, Any]], before: dict[str, Any]) -> dict[str, Any]:
        return metric_report.summary(
            self.args, records, before["retrieval_before"], self.index.size(), self.pixels
        )

    def plot(self, output: Path, records: list[dict[str, Any]], before: dict[str, Any]) -> None:
        metric_report.plot(
            output,
            records,
            before["retrieval_before"],
            self.pixels,
            self.index,
            self.embed(self.data.x_test),
            self.data,
            self.args.train_classes,
            self.args.seed,
        )

    def table(self, summary: dict[str, Any]) -> str:
        return metric_report.table(summary)

    def last_line(self, output: Path) -> str:
        return (
            f"tfsim: wrote model.keras, its index {index_path(output / 'model.keras').name}/, "
            f"history.json, logs/ and plots to {output}. Look images up with: tfsim lookup "
            f"--output {output} IMAGE..."
        )
