"""Two random views of each image, as self-supervised contrastive methods train on."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_number, check_pair, is_int, is_real
from tensorflow_similarity.augmenters import image_ops

_MAX_SEED = 2**63
_OWNER = "ViewAugmenter"


@keras.saving.register_keras_serializable(package="Similarity")
class ViewAugmenter:
    """Makes two independently augmented views of each image.

    Each view is, in this order: a random resized crop to `image_size`, a
    random horizontal flip, colour jitter (brightness, contrast, saturation
    and hue in random order, applied with probability `jitter_prob`), random
    greyscale conversion, Gaussian blur and solarisation. All parameters are
    drawn per image. The blur and solarisation probabilities may differ between
    the two views (Barlow Twins and BYOL make them asymmetric). The transforms
    follow torchvision (see `tensorflow_similarity.augmenters.image_ops`).

    The defaults are SimCLR's (Chen et al., 2020, appendix A, colour
    strength 1.0); `simclr_augmenter`, `simsiam_augmenter` and
    `barlow_augmenter` build each paper's pipeline.

    Seeding: every random draw is a stateless op (`tf.random.stateless_uniform`)
    of a per-call seed, so a call's views are a pure function of the images
    and that seed. By default the per-call seed is the next output of a
    `tf.random.Generator` created from `seed` (drawing from it is one atomic
    op, also inside `tf.data` map functions run with `num_parallel_calls`):
    successive calls give new views, and two augmenters built with the same
    `seed` give the same sequence of views. Parallel map calls run in no fixed
    order, though; for a pipeline whose every element is reproducible, number
    the elements (after `repeat`, so that epochs differ) and pass the number as
    `step`, which makes the per-call seed `[seed, step]`:
    `dataset.repeat().enumerate().map(lambda i, x: augmenter(x, step=i), ...)`.

    Args:
        image_size: Output size, an integer or `(height, width)`. Defaults to
            `None`: the input's (static) size.
        crop_scale: `(min, max)` fraction of the image area kept by the crop.
            Defaults to `(0.08, 1.0)`.
        crop_ratio: `(min, max)` aspect ratio (width / height) of the crop.
            Defaults to `(3 / 4, 4 / 3)`.
        flip_prob: Probability of a horizontal flip. Defaults to `0.5`.
        brightness: Brightness jitter strength: factors in `[1 - b, 1 + b]`.
            Defaults to `0.8`.
        contrast: Contrast jitter strength. Defaults to `0.8`.
        saturation: Saturation jitter strength. Defaults to `0.8`.
        hue: Maximum hue shift, in turns, within `[0, 0.5]`. Defaults to `0.2`.
        jitter_prob: Probability that colour jitter is applied. Defaults to `0.8`.
        grayscale_prob: Probability of greyscale conversion. Defaults to `0.2`.
        blur_prob: Probability of Gaussian blur, one float for both views or a
            pair `(view1, view2)`. Defaults to `0.5`.
        blur_sigma: `(min, max)` blur standard deviation in output pixels.
            Defaults to `(0.1, 2.0)`.
        blur_kernel_fraction: Blur kernel size as a fraction of the output
            side (SimCLR: 10%), at least 3. Defaults to `0.1`.
        solarize_prob: Probability of solarisation, one float or a pair
            `(view1, view2)`. Defaults to `0.0`.
        seed: Non-negative integer seed. Defaults to `None`: a random seed.

    Raises:
        ValueError: If an argument is out of range (see each argument).

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import ViewAugmenter
    >>> augmenter = ViewAugmenter(image_size=32, seed=1)
    >>> view1, view2 = augmenter(tf.random.uniform((4, 40, 40, 3)))
    >>> view1.shape
    TensorShape([4, 32, 32, 3])

    In a `tf.data` pipeline, on unlabelled batches or beside their labels (not
    a doctest: tracing the augmenter into a graph is slow):

    ```python
    pairs = tf.data.Dataset.from_tensor_slices(images).batch(64).map(augmenter)
    labelled = tf.data.Dataset.from_tensor_slices((images, labels)).batch(64)
    labelled = labelled.map(lambda x, y: (augmenter(x), y))
    ```
    """

    def __init__(
        self,
        image_size: int | Sequence[int] | None = None,
        crop_scale: Sequence[float] = (0.08, 1.0),
        crop_ratio: Sequence[float] = (3 / 4, 4 / 3),
        flip_prob: float = 0.5,
        brightness: float = 0.8,
        contrast: float = 0.8,
        saturation: float = 0.8,
        hue: float = 0.2,
        jitter_prob: float = 0.8,
        grayscale_prob: float = 0.2,
        blur_prob: float | Sequence[float] = 0.5,
        blur_sigma: Sequence[float] = (0.1, 2.0),
        blur_kernel_fraction: float = 0.1,
        solarize_prob: float | Sequence[float] = 0.0,
        seed: int | None = None,
    ) -> None:
        self.image_size = _check_image_size(image_size)
        self.crop_scale = check_pair("crop_scale", crop_scale, low=0.0, high=1.0, owner=_OWNER)
        if self.crop_scale[0] <= 0.0:
            raise ValueError(
                f"{_OWNER}: crop_scale must have a positive minimum area fraction. "
                f"Received: {crop_scale!r}"
            )
        self.crop_ratio = check_pair("crop_ratio", crop_ratio, low=0.0, owner=_OWNER)
        if self.crop_ratio[0] <= 0.0:
            raise ValueError(
                f"{_OWNER}: crop_ratio must have a positive minimum aspect ratio. "
                f"Received: {crop_ratio!r}"
            )
        self.flip_prob = check_number("flip_prob", flip_prob, low=0.0, high=1.0, owner=_OWNER)
        self.brightness = check_number("brightness", brightness, low=0.0, owner=_OWNER)
        self.contrast = check_number("contrast", contrast, low=0.0, owner=_OWNER)
        self.saturation = check_number("saturation", saturation, low=0.0, owner=_OWNER)
        self.hue = check_number("hue", hue, low=0.0, high=0.5, owner=_OWNER)
        self.jitter_prob = check_number("jitter_prob", jitter_prob, low=0.0, high=1.0, owner=_OWNER)
        self.grayscale_prob = check_number(
            "grayscale_prob", grayscale_prob, low=0.0, high=1.0, owner=_OWNER
        )
        self.blur_prob = _check_view_probabilities("blur_prob", blur_prob)
        self.blur_sigma = check_pair("blur_sigma", blur_sigma, low=0.0, owner=_OWNER)
        if self.blur_sigma[0] <= 0.0:
            raise ValueError(
                f"{_OWNER}: blur_sigma must have a positive minimum. "
                f"Received: blur_sigma={blur_sigma!r}"
            )
        self.blur_kernel_fraction = check_number(
            "blur_kernel_fraction", blur_kernel_fraction, low=0.0, high=1.0, owner=_OWNER
        )
        self.solarize_prob = _check_view_probabilities("solarize_prob", solarize_prob)
        self.seed = check_int("seed", seed, minimum=0, allow_none=True, owner=_OWNER)
        if self.seed is not None and self.seed >= _MAX_SEED:
            raise ValueError(f"{_OWNER}: seed must be below 2**63. Received: seed={seed}")
        self._seed = random.SystemRandom().randrange(_MAX_SEED) if seed is None else self.seed
        # Created eagerly: a tf.data map function cannot create variables.
        with tf.init_scope():
            self._generator = tf.random.Generator.from_seed(self._seed)

    def __call__(
        self, images: tf.Tensor, *, step: int | tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns two augmented views of `images`.

        Args:
            images: One image `[height, width, channels]` or a batch
                `[batch, height, width, channels]`; channels 1 or 3 and static
                height and width. Floating images must hold values in
                `[0, 1]`; integer images are rescaled by their dtype's maximum
                (uint8: by 255).
            step: Optional integer (or scalar integer tensor) that, with
                `seed`, determines the views. Defaults to `None`: the next
                seed of the augmenter's generator.

        Returns:
            `(view1, view2)`, float32 tensors of shape
            `[..., image_size[0], image_size[1], channels]` with values in `[0, 1]`.

        Raises:
            ValueError: If `images` has the wrong rank, channel count or dtype,
                or unknown height or width while `image_size` is `None`.
        """
        images = tf.convert_to_tensor(images)
        rank = images.shape.rank
        if rank not in (3, 4):
            raise ValueError(
                "ViewAugmenter expects one image [height, width, channels] or a batch "
                f"[batch, height, width, channels]. Received shape {images.shape}."
            )
        if images.shape[-1] not in (1, 3):
            raise ValueError(
                "ViewAugmenter expects channels-last images with 1 (grey) or 3 (RGB) "
                f"channels. Received shape {images.shape}; transpose channels-first images "
                "to channels-last."
            )
        if None in images.shape[-3:-1]:
            raise ValueError(
                "ViewAugmenter needs images of static height and width (crop boxes and blur "
                f"kernels depend on them). Received shape {images.shape}; resize the images "
                "or set the dataset's shape with tf.ensure_shape."
            )
        if images.dtype.is_floating:
            images = tf.cast(images, tf.float32)
        elif images.dtype.is_integer:
            images = tf.image.convert_image_dtype(images, tf.float32)
        else:
            raise ValueError(
                "ViewAugmenter expects float images in [0, 1] or integer images. "
                f"Received dtype {images.dtype.name}."
            )
        if rank == 3:
            images = images[None]
        size = self.image_size or (images.shape[1], images.shape[2])

        if step is None:
            seed = self._generator.make_seeds(1)[:, 0]
        else:
            seed = tf.stack([tf.constant(self._seed, tf.int64), tf.cast(step, tf.int64)])
        views = tuple(
            self._augment(images, size, view, tf.random.experimental.stateless_fold_in(seed, view))
            for view in (0, 1)
        )
        if rank == 3:
            views = tuple(v[0] for v in views)
        return views

    def _augment(
        self, images: tf.Tensor, size: tuple[int, int], view: int, seed: tf.Tensor
    ) -> tf.Tensor:
        def seed_for(op: int) -> tf.Tensor:
            return tf.random.experimental.stateless_fold_in(seed, op)

        x = image_ops.random_resized_crop(
            images, size, self.crop_scale, self.crop_ratio, seed_for(0)
        )
        x = image_ops.random_flip_left_right(x, self.flip_prob, seed_for(1))
        if self.jitter_prob > 0:
            x = image_ops.random_color_jitter(
                x,
                self.brightness,
                self.contrast,
                self.saturation,
                self.hue,
                self.jitter_prob,
                seed_for(2),
            )
        if self.grayscale_prob > 0:
            x = image_ops.random_grayscale(x, self.grayscale_prob, seed_for(3))
        if self.blur_prob[view] > 0:
            kernel_size = tuple(
                image_ops.blur_kernel_size(side, self.blur_kernel_fraction) for side in size
            )
            x = image_ops.random_gaussian_blur(
                x, self.blur_sigma, self.blur_prob[view], seed_for(4), kernel_size
            )
        if self.solarize_prob[view] > 0:
            x = image_ops.random_solarize(x, self.solarize_prob[view], seed_for(5))
        return x

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor arguments as plain Python values."""
        return {
            "image_size": None if self.image_size is None else list(self.image_size),
            "crop_scale": list(self.crop_scale),
            "crop_ratio": list(self.crop_ratio),
            "flip_prob": self.flip_prob,
            "brightness": self.brightness,
            "contrast": self.contrast,
            "saturation": self.saturation,
            "hue": self.hue,
            "jitter_prob": self.jitter_prob,
            "grayscale_prob": self.grayscale_prob,
            "blur_prob": list(self.blur_prob),
            "blur_sigma": list(self.blur_sigma),
            "blur_kernel_fraction": self.blur_kernel_fraction,
            "solarize_prob": list(self.solarize_prob),
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ViewAugmenter:
        """Creates an augmenter from `get_config()`'s output."""
        return cls(**config)

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"


def _check_view_probabilities(name: str, value: Any) -> tuple[float, float]:
    if is_real(value):
        probability = check_number(name, value, low=0.0, high=1.0, owner=_OWNER)
        return probability, probability
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(
            f"{_OWNER}: {name} must be a probability or a pair (view1, view2) of "
            f"probabilities. Received: {name}={value!r}"
        )
    return check_number(name, value[0], low=0.0, high=1.0, owner=_OWNER), check_number(
        name, value[1], low=0.0, high=1.0, owner=_OWNER
    )


def _check_image_size(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if is_int(value):
        value = (value, value)
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or len(value) != 2
        or not all(is_int(v) and v > 0 for v in value)
    ):
        raise ValueError(
            f"{_OWNER}: image_size must be None, a positive integer or a pair (height, width) of "
            f"positive integers. Received: image_size={value!r}"
        )
    return int(value[0]), int(value[1])
