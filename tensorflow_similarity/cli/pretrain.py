"""The self-supervised job (`tfsim pretrain`): a `ContrastiveModel`, its views, its accuracies.

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
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import augmenters
from tensorflow_similarity.architectures.registry import BUILDERS
from tensorflow_similarity.callbacks import KNNAccuracy
from tensorflow_similarity.cli import fitting, pretrain_report
from tensorflow_similarity.cli.devices import DevicePlan, plan_devices
from tensorflow_similarity.cli.disk_full import disk_full_is_usage_error
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.fitting import (
    augmented_queries,
    inference_function,
    learning_rate_text,
    parallel_batches,
    pixel_vectors,
    scheduled_optimizer,
    sync_bn_policy,
)
from tensorflow_similarity.cli.run import Job
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.evaluators import linear_probe_on_features
from tensorflow_similarity.models import create_contrastive_model
from tensorflow_similarity.models.algorithms import get_algorithm


def view_augmenter(args: argparse.Namespace) -> augmenters.ViewAugmenter:
    """The views of a run, as its method declares them: for glyphs, or for photographs.

    Crops, flips and colour jitter suit photographs (every data set but
    glyphs); a glyph's views are affine warps and stroke widths by default (a
    mirrored letter is another letter). See
    `ContrastiveAlgorithm.photograph_views` and `glyph_views`.
    """
    method = get_algorithm(args.algorithm)
    if args.data == "glyphs":
        return method.glyph_views(args.image_size, seed=args.seed)
    return method.photograph_views(args.image_size, seed=args.seed)


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


class PretrainJob(Job):
    """Self-supervised pretraining of a `ContrastiveModel` (`tfsim pretrain`).

    Figures: the kNN accuracy (k=20, against the clean training images) of
    the clean test images and of augmented ones (`fitting.augmented_queries`),
    before training and after each epoch, beside the raw pixels'; and the
    linear-probe top-1 accuracy (`linear_probe_accuracy`) of the same
    features on the same splits, before and after training, beside the raw
    pixels'.
    """

    def __init__(self, args: argparse.Namespace, plan: DevicePlan, data: ImageData) -> None:
        super().__init__(args, plan, data)
        self.knn_pixels = float("nan")
        self.linear_pixels: float | None = None

    @staticmethod
    def check_data(args: argparse.Namespace, data: ImageData) -> None:
        """Refuses a batch larger than the training images, or batch norm over one image.

        Warns if the training images are one class.
        """
        check_batch_norm_batch(args, plan_devices(args.strategy, args.replicas).replicas)
        if len(data.y_train) < args.batch_size:
            raise UsageError(
                f"--batch-size {args.batch_size} is larger than the {len(data.y_train)} "
                "training images; use a smaller batch or more data."
            )
        _warn_single_class(data)

    @property
    def train_images(self) -> np.ndarray:
        return self.data.x_train

    @property
    def network(self) -> keras.Model:
        return self.model.backbone

    def build(self, steps_per_epoch: int) -> keras.Model:
        args = self.args
        sync_bn = sync_bn_policy(args)
        size = args.image_size
        backbone = BUILDERS[args.backbone](
            (size, size, 3),
            include_top=False,
            pooling="avg",
            sync_bn=sync_bn,
            **fitting.width_argument(args),
        )
        self.model = create_contrastive_model(
            backbone,
            args.algorithm,
            projector_hidden_dim=args.projector_dim,
            projector_output_dim=args.projector_dim,
            sync_bn=sync_bn,
            bn=args.bn,
            algorithm_options=get_algorithm(args.algorithm).run_options(args.epochs),
        )
        self.model.compile(optimizer=scheduled_optimizer(args, steps_per_epoch))
        self.model(tf.zeros((1, size, size, 3)))
        return self.model

    def batches(self, first_epoch: int, steps_per_epoch: int) -> tf.data.Dataset:
        self.augmenter = view_augmenter(self.args)
        return view_batches(
            self.data.x_train,
            self.augmenter,
            self.args.batch_size,
            self.args.seed,
            first_epoch,
            self.args.epochs,
            deterministic=self.args.deterministic,
        )

    def evaluations(self) -> list[keras.callbacks.Callback]:
        data = self.data
        self.embed = inference_function(self.model.backbone)
        self.knn = KNNAccuracy(
            (data.x_train, data.y_train),
            (data.x_test, data.y_test),
            k=min(20, len(data.y_train)),
            embedding_fn=self.embed,
        )
        self.knn_augmented = KNNAccuracy(
            (data.x_train, data.y_train),
            (augmented_queries(data.x_test, self.augmenter), data.y_test),
            k=self.knn.k,
            embedding_fn=self.embed,
            name="knn_accuracy_augmented",
        )
        return [self.knn, self.knn_augmented]

    def figures_before(self, saved: dict[str, Any]) -> dict[str, Any]:
        data = self.data
        knn_before = saved.get("knn_accuracy_before")
        knn_augmented_before = saved.get("knn_accuracy_augmented_before")
        if knn_before is None:
            knn_before = self.knn.evaluate()
        # The reference training should beat: the raw pixels' kNN accuracy.
        self.knn_pixels = KNNAccuracy(
            (data.x_train, data.y_train),
            (data.x_test, data.y_test),
            k=self.knn.k,
            embedding_fn=pixel_vectors,
        ).evaluate()
        if knn_augmented_before is None:
            knn_augmented_before = self.knn_augmented.evaluate()
        # A resumed run's backbone is already trained: its figure before is the saved one.
        if "linear_accuracy_before" in saved:
            linear_before = saved["linear_accuracy_before"]
        else:
            linear_before = linear_probe_accuracy(self.embed, data)
        self.linear_pixels = linear_probe_accuracy(pixel_vectors, data)
        return {
            "knn_accuracy_before": knn_before,
            "knn_accuracy_augmented_before": knn_augmented_before,
            "linear_accuracy_before": linear_before,
        }

    def first_line(self, before: dict[str, Any], batch_norm: str) -> str:
        args, data, size = self.args, self.data, self.args.image_size
        return (
            f"tfsim: {args.algorithm} with {args.backbone} on {data.source}: "
            f"{len(data.y_train)} train / {len(data.y_test)} test images at {size}x{size}; "
            f"{self.plan.replicas} replicas ({args.strategy}), batch norm {batch_norm}; "
            f"{learning_rate_text(args)}; "
            f"kNN accuracy before training {before['knn_accuracy_before']:.3f} "
            f"(augmented queries {before['knn_accuracy_augmented_before']:.3f}; "
            f"raw pixels {self.knn_pixels:.3f}); "
            f"linear-probe accuracy before training "
            f"{pretrain_report.accuracy_text(before.get('linear_accuracy_before'))} "
            f"(raw pixels {pretrain_report.accuracy_text(self.linear_pixels)})"
        )

    def save(self, output: Path) -> None:
        with disk_full_is_usage_error():
            self.model.save(output / "model.keras")

    def summary(self, records: list[dict[str, Any]], before: dict[str, Any]) -> dict[str, Any]:
        return pretrain_report.summary(
            records,
            before,
            self.knn_pixels,
            linear_after=linear_probe_accuracy(self.embed, self.data),
            linear_pixels=self.linear_pixels,
        )

    def plot(self, output: Path, records: list[dict[str, Any]], before: dict[str, Any]) -> None:
        pretrain_report.plot(
            output,
            records,
            before["knn_accuracy_before"],
            self.knn_pixels,
            self.data.x_test,
            self.embed(self.data.x_test),
            self.data.y_test,
            self.data.class_names,
            self.args.seed,
            knn_augmented_before=before["knn_accuracy_augmented_before"],
        )

    def table(self, summary: dict[str, Any]) -> str:
        return pretrain_report.table(summary)

    def last_line(self, output: Path) -> str:
        return f"tfsim: wrote model.keras, history.json, logs/ and plots to {output}"


def linear_probe_accuracy(
    embed: Callable[[np.ndarray], np.ndarray], data: ImageData
) -> float | None:
    """The linear-probe top-1 accuracy of `embed`'s features, or `None` where none can be fitted.

    The splits of the kNN accuracy: a linear classifier is fitted on the
    clean training images' features and scored on the clean test images',
    with `evaluators.linear_probe_on_features`' protocol
    (`pretrain_report.LINEAR_PROBE_PROTOCOL`: its defaults). The probe holds out a fifth of
    each class to choose its learning rate, so it needs two classes and one
    class of at least five training images; without them (a folder of one
    class, a handful of images) there is no figure.

    Args:
        embed: Maps `[n, height, width, channels]` images to `[n, ...]`
            features (`fitting.inference_function`, or `pixel_vectors`).
        data: The run's images.
    """
    _, counts = np.unique(data.y_train, return_counts=True)
    if len(counts) < 2 or counts.max() < 5:
        return None
    result = linear_probe_on_features(
        embed(data.x_train),
        data.y_train,
        embed(data.x_test),
        data.y_test,
        top_k=1,
        **pretrain_report.LINEAR_PROBE_PROTOCOL,
    )
    return result.top1_accuracy


def check_batch_norm_batch(args: argparse.Namespace, replicas: int) -> None:
    """Refuses a run whose batch norm would normalise one image at a time.

    Batch norm in training mode subtracts the mean of the images it
    normalises together: over one image, every output is its offset, the
    same for any input, so the representation collapses from the first step
    (BYOL's loss reads 4, the projections' spread 0) whatever the method.
    The images normalised together are one replica's (`--batch-size` over
    the replicas), or with `--sync-bn` those of a sync group
    (`--sync-group-size`, all replicas by default). Every model of
    `tfsim pretrain` has batch norm (its projector's, and the backbone's but
    ConvNeXt's).

    Args:
        args: The run's options.
        replicas: The replicas of the run.

    Raises:
        UsageError: When batch norm would see one image, or `--bn shuffle`
            runs on one replica, before any work.
    """
    if args.bn == "shuffle" and replicas == 1:
        raise UsageError(
            "--bn shuffle permutes the key encoder's batch across replicas, and this run has "
            "one: a permutation of one device's batch leaves every batch statistic as it was. "
            "Use --replicas 2 or more, or --bn per_replica."
        )
    per_replica = args.batch_size // replicas
    group = (args.sync_group_size or replicas) if args.sync_bn else 1
    if per_replica * group > 1:
        return
    if replicas == 1 or args.sync_bn:
        remedy = f"Use --batch-size {2 * replicas} or more"
        if args.sync_bn and group < replicas:
            remedy += ", or a larger --sync-group-size"
    else:
        remedy = f"Use --sync-bn (statistics over all {replicas} replicas' images), or " + (
            f"--batch-size {2 * replicas} or more"
        )
    raise UsageError(
        f"--batch-size {args.batch_size} over {replicas} replica(s) gives batch norm one image "
        "at a time: normalised over a single image, every output is the layer's offset, so the "
        f"embeddings collapse from the first step and the run would learn nothing. {remedy}."
    )


def _warn_single_class(data: ImageData) -> None:
    """Warns on stderr that kNN accuracy means nothing when the training images are one class."""
    classes = np.unique(data.y_train)
    if len(classes) != 1:
        return
    print(
        f"tfsim: warning: the training images of {data.source} are all of one class "
        f"({data.class_names[int(classes[0])]}): every neighbour is of that class, so the kNN "
        "accuracy reads 1.000 before and after training and says nothing about the "
        "embeddings (the loss still does). Give a folder with one sub-folder of images per "
        "class to measure it.",
        file=sys.stderr,
        flush=True,
    )
