"""`TFDatasetMultiShotMemorySampler`: a memory sampler over a TFDS or `tf.data` dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.sampler import Augmenter, check_sampler_args

PreprocessFn = Callable[[Any, Any], tuple[Any, Any]]


class TFDatasetMultiShotMemorySampler(MultiShotMemorySampler):
    """A `MultiShotMemorySampler` over a TensorFlow Datasets dataset or a local `tf.data.Dataset`.

    The dataset is read once, at construction, into memory; batches are then
    drawn as by `MultiShotMemorySampler` (`classes_per_batch` classes,
    `examples_per_class_per_batch` examples each; under a `tf.distribute`
    strategy one batch is the global batch `fit` splits over the replicas).

    `dataset_name` is either the name of a dataset of the
    [TFDS catalogue](https://www.tensorflow.org/datasets/catalog/), whose
    `splits` are loaded with `tfds.load` (downloaded if needed; this needs the
    `tensorflow-datasets` package), or a finite `tf.data.Dataset` (an
    extension of 0.17), whose elements are dicts holding `x_key` and `y_key`
    or tuples `(x, y, ...)`; `splits` is then ignored. `preprocess_fn(x, y)
    -> (x, y)` is applied to each example as it is read, e.g. to resize
    images to one shape.

    Args:
        dataset_name: A TFDS dataset name or a `tf.data.Dataset`.
        classes_per_batch: Number of distinct classes in a batch.
        x_key: Feature holding the model input. Defaults to `"image"`.
        y_key: Feature holding the integer label. Defaults to `"label"`.
        splits: TFDS split or splits to load and concatenate. Defaults to
            `("train", "test")`.
        examples_per_class_per_batch: Number of examples of each class in a
            batch. Defaults to 2.
        steps_per_epoch: Number of batches per epoch. Defaults to 1000.
        class_list: The classes to sample from. Defaults to `None`: all.
        total_examples_per_class: The most examples of each class in the pool.
            Defaults to `None`: all of them.
        preprocess_fn: `None` or a callable `(x, y) -> (x, y)` applied to each
            example read. Defaults to `None`.
        augmenter: `None` or a callable `(x, y, num_augmentations_per_example,
            is_warmup) -> (x, y)` applied to each batch. Defaults to `None`.
        warmup: Number of epochs during which the augmenter gets
            `is_warmup=True`. Defaults to -1: none.
        seed: Non-negative integer seed of the pool and the batches (keyword
            only). Defaults to `None`: a random one.
        allow_replacement: As in `MultiShotMemorySampler` (keyword only).
            Defaults to `True`.
        **kwargs: `keras.utils.PyDataset` options: `workers`,
            `use_multiprocessing`, `max_queue_size`.

    Raises:
        ImportError: If `dataset_name` is a name and `tensorflow-datasets` is
            not installed.
        ValueError: If `x_key` or `y_key` is not a feature of the dataset, a
            `tf.data.Dataset` is infinite or its elements are neither dicts nor
            tuples, or for the reasons `MultiShotMemorySampler` gives.
        TypeError: If `dataset_name` is neither a string nor a
            `tf.data.Dataset`, the labels are not integers, or `preprocess_fn`
            is neither `None` nor callable.

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import TFDatasetMultiShotMemorySampler
    >>> ds = tf.data.Dataset.from_tensor_slices(
    ...     {"image": tf.random.uniform((40, 4)), "label": tf.range(40) % 4}
    ... )
    >>> sampler = TFDatasetMultiShotMemorySampler(ds, 2, steps_per_epoch=10, seed=0)
    >>> sampler[0][0].shape
    TensorShape([4, 4])
    """

    def __init__(
        self,
        dataset_name: str | tf.data.Dataset,
        classes_per_batch: int,
        x_key: str = "image",
        y_key: str = "label",
        splits: str | Sequence[str] = ("train", "test"),
        examples_per_class_per_batch: int = 2,
        steps_per_epoch: int = 1000,
        class_list: Sequence[int] | None = None,
        total_examples_per_class: int | None = None,
        preprocess_fn: PreprocessFn | None = None,
        augmenter: Augmenter | None = None,
        warmup: int = -1,
        *,
        seed: int | None = None,
        allow_replacement: bool = True,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        # Reading a dataset can take long (or download it): every argument is
        # checked first.
        check_sampler_args(
            owner,
            classes_per_batch=classes_per_batch,
            examples_per_class_per_batch=examples_per_class_per_batch,
            steps_per_epoch=steps_per_epoch,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
        )
        check_int(
            "total_examples_per_class",
            total_examples_per_class,
            minimum=1,
            allow_none=True,
            owner=owner,
        )
        if preprocess_fn is not None and not callable(preprocess_fn):
            raise TypeError(
                f"{owner}: preprocess_fn must be None or a callable (x, y) -> (x, y). "
                f"Received {preprocess_fn!r}."
            )
        if isinstance(dataset_name, tf.data.Dataset):
            pairs = _local_pairs(
                dataset_name, x_key, y_key, owner, check_labels=preprocess_fn is None
            )
        elif isinstance(dataset_name, str) and dataset_name:
            pairs = _tfds_pairs(dataset_name, x_key, y_key, splits, owner)
        else:
            raise TypeError(
                f"{owner}: dataset_name must be a TFDS dataset name or a tf.data.Dataset. "
                f"Received {dataset_name!r}."
            )

        x, y = [], []
        for x_item, y_item in pairs:
            if preprocess_fn is not None:
                x_item, y_item = preprocess_fn(x_item, y_item)
            x.append(np.asarray(x_item))
            y.append(np.asarray(y_item))
        super().__init__(
            x,
            np.asarray(y),
            classes_per_batch=classes_per_batch,
            examples_per_class_per_batch=examples_per_class_per_batch,
            steps_per_epoch=steps_per_epoch,
            class_list=class_list,
            total_examples_per_class=total_examples_per_class,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
            allow_replacement=allow_replacement,
            **kwargs,
        )


def _local_pairs(
    dataset: tf.data.Dataset, x_key: str, y_key: str, owner: str, *, check_labels: bool
) -> Iterable[tuple[Any, Any]]:
    """The `(x, y)` pairs of a local dataset of dicts or tuples, checked before reading.

    `check_labels` also checks that the labels are integers (when no
    `preprocess_fn` may still change them).
    """
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            f"{owner}: the tf.data.Dataset is infinite (a repeat() without count?); it is read "
            "into memory, so pass a finite one."
        )
    spec = dataset.element_spec
    if isinstance(spec, dict):
        _check_keys(spec.keys(), x_key, y_key, owner)
        label_spec = spec[y_key]
        pairs = ((element[x_key], element[y_key]) for element in dataset)
    elif isinstance(spec, tuple) and len(spec) >= 2:
        label_spec = spec[1]
        pairs = ((element[0], element[1]) for element in dataset)
    else:
        raise ValueError(
            f"{owner}: the tf.data.Dataset's elements must be dicts holding x_key and y_key, or "
            f"tuples (x, y, ...). Received elements of spec {spec}."
        )
    dtype = getattr(label_spec, "dtype", None)
    if check_labels and not (isinstance(dtype, tf.DType) and dtype.is_integer):
        raise TypeError(
            f"{owner}: the labels must be integer class ids. Received labels of spec "
            f"{label_spec}; map class names to integers, or cast whole-number labels with "
            "tf.cast (a preprocess_fn may do it)."
        )
    return pairs


def _tfds_pairs(
    name: str, x_key: str, y_key: str, splits: str | Sequence[str], owner: str
) -> Iterable[tuple[Any, Any]]:
    """The `(x, y)` pairs of the TFDS dataset `name`'s splits, loaded one after the other."""
    # An optional dependency: imported only when a TFDS dataset is asked for.
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            f"{owner}: loading the TFDS dataset {name!r} needs the tensorflow-datasets package: "
            "`pip install tensorflow-datasets`. Or pass a tf.data.Dataset instead of a name."
        ) from error
    for split in [splits] if isinstance(splits, str) else list(splits):
        dataset, info = tfds.load(name, split=split, with_info=True)
        _check_keys(info.features.keys(), x_key, y_key, owner)
        for element in dataset:
            yield element[x_key], element[y_key]


def _check_keys(available: Iterable[str], x_key: str, y_key: str, owner: str) -> None:
    available = list(available)
    for name, key in (("x_key", x_key), ("y_key", y_key)):
        if key not in available:
            raise ValueError(
                f"{owner}: {name}={key!r} is not a feature of the dataset. Its features are "
                f"{available}."
            )
