"""Two random views of each image, as self-supervised contrastive methods train on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_pair
from tensorflow_similarity.augmenters import _pipeline, image_ops, view_draws
from tensorflow_similarity.augmenters._inputs import (
    call_seed,
    check_blur,
    check_color_jitter,
    check_crop_ratio,
    check_probability,
    check_probability_pair,
    check_seed,
    check_size,
    checked_images,
    seed_generator,
)

_OWNER = "ViewAugmenter"
_VIEW_PAIR = "(view1, view2) of probabilities"


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

    A call draws every parameter for the whole batch, then makes views of
    40 x 40 pixels or more image by image on a CPU (a `tf.data` pipeline, or
    a step placed on a CPU), each view kept in the processor's cache from its
    crop to its last transform; smaller views, and views of images placed on
    a GPU or TPU, are made on the batch at once. Both ways make the same
    views, up to float32 rounding (a few 1e-6).

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
        self.image_size = (
            None if image_size is None else check_size("image_size", image_size, _OWNER)
        )
        self.crop_scale = check_pair("crop_scale", crop_scale, low=0.0, high=1.0, owner=_OWNER)
        if self.crop_scale[0] <= 0.0:
            raise ValueError(
                f"{_OWNER}: crop_scale must have a positive minimum area fraction. "
                f"Received: {crop_scale!r}"
            )
        self.crop_ratio = check_crop_ratio(crop_ratio, _OWNER)
        self.flip_prob = check_probability("flip_prob", flip_prob, _OWNER)
        self.brightness, self.contrast, self.saturation, self.hue = check_color_jitter(
            brightness, contrast, saturation, hue, _OWNER
        )
        self.jitter_prob = check_probability("jitter_prob", jitter_prob, _OWNER)
        self.grayscale_prob = check_probability("grayscale_prob", grayscale_prob, _OWNER)
        self.blur_prob = check_probability_pair("blur_prob", blur_prob, _OWNER, _VIEW_PAIR)
        self.blur_sigma, self.blur_kernel_fraction = check_blur(
            blur_sigma, blur_kernel_fraction, _OWNER
        )
        self.solarize_prob = check_probability_pair(
            "solarize_prob", solarize_prob, _OWNER, _VIEW_PAIR
        )
        self.seed = check_seed(seed, _OWNER)
        self._seed, self._generator = seed_generator(self.seed)

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
        images = checked_images(images, _OWNER, "crop boxes and blur kernels depend on them")
        rank = images.shape.rank
        if rank == 3:
            images = images[None]
        size = self.image_size or (images.shape[1], images.shape[2])
        views = self._two_views(images, size, call_seed(self._generator, self._seed, step))
        if rank == 3:
            views = tuple(v[0] for v in views)
        return views

    def _two_views(
        self, images: tf.Tensor, size: tuple[int, int], seed: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Both views of a batch of checked images, from the call's seed."""
        fold = tf.random.experimental.stateless_fold_in
        draws = _pipeline.concat_draws(
            [self._draws(images, size, view, fold(seed, view)) for view in (0, 1)]
        )
        kernel_size = tuple(
            image_ops.blur_kernel_size(side, self.blur_kernel_fraction) for side in size
        )
        views = _pipeline.make_views(
            images, draws, size, kernel_size, with_hue=self.hue > 0, each_image=self._each_image
        )
        view1, view2 = tf.split(views, 2, axis=0)
        return view1, view2

    # `None`: the default way of `_pipeline.make_views`; tests and benchmarks set it.
    _each_image: bool | None = None

    def _draws(
        self, images: tf.Tensor, size: tuple[int, int], view: int, seed: tf.Tensor
    ) -> _pipeline.ViewDraws:
        """One view of each image: every random parameter, drawn for the batch."""

        def seed_for(op: int) -> tf.Tensor:
            return tf.random.experimental.stateless_fold_in(seed, op)

        batch = tf.shape(images)[0]
        blur = solarize = jitter = grayscale = None
        if self.jitter_prob > 0:
            jitter = view_draws.draw_color_jitter(
                batch,
                self.brightness,
                self.contrast,
                self.saturation,
                self.hue,
                self.jitter_prob,
                seed_for(2),
            )
        if self.grayscale_prob > 0:
            grayscale = view_draws.bernoulli_mask(batch, self.grayscale_prob, seed_for(3))
        # Drawn for both views when either blurs or solarises: a view whose
        # probability is 0 draws no image.
        if max(self.blur_prob) > 0:
            blur = view_draws.draw_gaussian_blur(
                batch, self.blur_sigma, self.blur_prob[view], seed_for(4)
            )
        if max(self.solarize_prob) > 0:
            solarize = view_draws.bernoulli_mask(batch, self.solarize_prob[view], seed_for(5))
        return _pipeline.ViewDraws(
            boxes=view_draws.crop_boxes(
                batch, images.shape[1:3], size, self.crop_scale, self.crop_ratio, seed_for(0)
            ),
            source=tf.range(batch),
            flip=view_draws.bernoulli_mask(batch, self.flip_prob, seed_for(1)),
            jitter=jitter,
            grayscale=grayscale,
            blur=blur,
            solarize=solarize,
        )

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
