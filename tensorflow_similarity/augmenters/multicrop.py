"""DINO's multi-crop views: two large global crops and several small local crops of each image.

`dino.multicrop_augmenter` configures `MultiCropAugmenter` with DINO's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_pair
from tensorflow_similarity.augmenters import _inputs, _pipeline, image_ops, view_draws

_OWNER = "MultiCropAugmenter"

# Operation numbers folded into a call's seed, so that each random draw has its own stream.
_CROP, _FLIP, _JITTER, _GRAYSCALE, _BLUR, _SOLARIZE = range(6)
# The second fold: which group of views an operation draws for.
_GLOBAL, _LOCAL = 0, 1


@keras.saving.register_keras_serializable(package="Similarity")
class MultiCropAugmenter:
    """Makes two global and `n_local` local views of each image, as DINO trains on.

    Multi-crop (Caron et al., 2020, SwAV) as DINO ("Emerging Properties in
    Self-Supervised Vision Transformers", Caron et al., ICCV 2021) uses it:
    two global views, random resized crops covering a large part of the image
    (area `global_crop_scale`), resized to `global_size`; and `n_local` local
    views, crops of a small part (area `local_crop_scale`), resized to the
    smaller `local_size`. The teacher sees only the global views, the student
    all of them.

    Each view then goes through DINO's photometric transforms, in this order:
    a horizontal flip, colour jitter (brightness, contrast, saturation and
    hue in random order, with probability `jitter_prob`), greyscale
    conversion, Gaussian blur and solarisation. Blur and solarisation differ
    by view: by default the first global view is always blurred and never
    solarised, the second is blurred with probability 0.1 and solarised with
    probability 0.2, and the local views are blurred with probability 0.5 and
    never solarised. Every parameter is drawn per image and per view; the
    transforms are `tensorflow_similarity.augmenters.image_ops`'s, batched
    over all the local views of a call at once. Values stay in `[0, 1]`.

    The defaults are DINO's reference code (`main_dino.py`,
    `DataAugmentationDINO`): 224 and 96 pixel views, 8 local crops, crop areas
    `(0.4, 1.0)` and `(0.05, 0.4)`, jitter `(0.4, 0.4, 0.2, 0.1)`. Two
    differences: crops are resized bilinearly (DINO: bicubic), and the blur
    kernel spans `blur_kernel_fraction` of the view's side (at least 3
    pixels) where PIL's blur kernel grows with sigma. Fewer local crops cost
    less: at 96 pixels each costs about a fifth of a 224-pixel global view.

    Small images: views no larger than the image, local views about half the
    global side. For 32-pixel images (CIFAR) `global_size=32, local_size=16`;
    for line drawings (glyphs of `load_glyphs`, 28-pixel digits)
    `multicrop_augmenter(28, 14, flip=False, color=False)`, or `32, 16` at 32
    pixels: a mirrored letter is another letter, and jitter or solarisation
    of white ink on black only dims or inverts the strokes.

    Seeding is `ViewAugmenter`'s: every draw is a stateless op of a per-call
    seed, the next output of a generator created from `seed`, or
    `[seed, step]` when `step` is given (see `ViewAugmenter` for `tf.data`
    pipelines). The global views do not depend on `n_local`: adding local
    crops leaves them unchanged.

    Args:
        global_size: Side of the global views, an integer or
            `(height, width)`. Defaults to `224`.
        local_size: Side of the local views, an integer or `(height, width)`,
            at most `global_size` on each side. Defaults to `96`.
        n_local: Number of local views, 0 or more. Defaults to `8`.
        global_crop_scale: `(min, max)` fraction of the image area kept by a
            global crop, with `0 < min <= max <= 1`. Defaults to `(0.4, 1.0)`.
        local_crop_scale: `(min, max)` fraction of the image area kept by a
            local crop, with `0 < min <= max <= 1`. Defaults to `(0.05, 0.4)`.
        crop_ratio: `(min, max)` aspect ratio (width / height) of every crop.
            Defaults to `(3 / 4, 4 / 3)`.
        flip_prob: Probability of a horizontal flip; `0.0` turns flips off.
            Defaults to `0.5`.
        brightness: Brightness jitter strength: factors in `[1 - b, 1 + b]`.
            Defaults to `0.4`.
        contrast: Contrast jitter strength. Defaults to `0.4`.
        saturation: Saturation jitter strength. Defaults to `0.2`.
        hue: Maximum hue shift, in turns, within `[0, 0.5]`. Defaults to `0.1`.
        jitter_prob: Probability that colour jitter is applied; `0.0` turns
            it off. Defaults to `0.8`.
        grayscale_prob: Probability of greyscale conversion. Defaults to `0.2`.
        global_blur_prob: Probability of Gaussian blur of the global views,
            one float for both or a pair `(first, second)`. Defaults to
            `(1.0, 0.1)`.
        local_blur_prob: Probability of Gaussian blur of each local view.
            Defaults to `0.5`.
        blur_sigma: `(min, max)` blur standard deviation in output pixels.
            Defaults to `(0.1, 2.0)`.
        blur_kernel_fraction: Blur kernel size as a fraction of the view's
            side, at least 3 pixels. Defaults to `0.1`.
        global_solarize_prob: Probability of solarisation of the global views,
            one float or a pair `(first, second)`. Defaults to `(0.0, 0.2)`.
        local_solarize_prob: Probability of solarisation of each local view.
            Defaults to `0.0`.
        seed: Non-negative integer seed. Defaults to `None`: a random seed.

    Raises:
        ValueError: If an argument is out of range: `n_local` negative, a
            size not positive, `local_size` larger than `global_size`, a crop
            scale not `0 < min <= max <= 1`, a probability outside `[0, 1]`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import MultiCropAugmenter
    >>> augmenter = MultiCropAugmenter(global_size=32, local_size=16, n_local=4, seed=1)
    >>> global_views, local_views = augmenter(tf.random.uniform((2, 40, 40, 3)))
    >>> global_views.shape, local_views.shape
    (TensorShape([2, 2, 32, 32, 3]), TensorShape([2, 4, 16, 16, 3]))
    """

    def __init__(
        self,
        global_size: int | Sequence[int] = 224,
        local_size: int | Sequence[int] = 96,
        n_local: int = 8,
        global_crop_scale: Sequence[float] = (0.4, 1.0),
        local_crop_scale: Sequence[float] = (0.05, 0.4),
        crop_ratio: Sequence[float] = (3 / 4, 4 / 3),
        flip_prob: float = 0.5,
        brightness: float = 0.4,
        contrast: float = 0.4,
        saturation: float = 0.2,
        hue: float = 0.1,
        jitter_prob: float = 0.8,
        grayscale_prob: float = 0.2,
        global_blur_prob: float | Sequence[float] = (1.0, 0.1),
        local_blur_prob: float = 0.5,
        blur_sigma: Sequence[float] = (0.1, 2.0),
        blur_kernel_fraction: float = 0.1,
        global_solarize_prob: float | Sequence[float] = (0.0, 0.2),
        local_solarize_prob: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self.global_size = _inputs.check_size("global_size", global_size, _OWNER)
        self.local_size = _inputs.check_size("local_size", local_size, _OWNER)
        if self.local_size[0] > self.global_size[0] or self.local_size[1] > self.global_size[1]:
            raise ValueError(
                f"{_OWNER}: local_size must not exceed global_size on either side (local views "
                f"are the small ones). Received: local_size={local_size!r}, "
                f"global_size={global_size!r}"
            )
        self.n_local = check_int("n_local", n_local, minimum=0, owner=_OWNER)
        self.global_crop_scale = _check_scale("global_crop_scale", global_crop_scale)
        self.local_crop_scale = _check_scale("local_crop_scale", local_crop_scale)
        self.crop_ratio = _inputs.check_crop_ratio(crop_ratio, _OWNER)
        self.flip_prob = _inputs.check_probability("flip_prob", flip_prob, _OWNER)
        self.brightness, self.contrast, self.saturation, self.hue = _inputs.check_color_jitter(
            brightness, contrast, saturation, hue, _OWNER
        )
        self.jitter_prob = _inputs.check_probability("jitter_prob", jitter_prob, _OWNER)
        self.grayscale_prob = _inputs.check_probability("grayscale_prob", grayscale_prob, _OWNER)
        self.global_blur_prob = _check_global_probabilities("global_blur_prob", global_blur_prob)
        self.local_blur_prob = _inputs.check_probability("local_blur_prob", local_blur_prob, _OWNER)
        self.blur_sigma, self.blur_kernel_fraction = _inputs.check_blur(
            blur_sigma, blur_kernel_fraction, _OWNER
        )
        self.global_solarize_prob = _check_global_probabilities(
            "global_solarize_prob", global_solarize_prob
        )
        self.local_solarize_prob = _inputs.check_probability(
            "local_solarize_prob", local_solarize_prob, _OWNER
        )
        self.seed = _inputs.check_seed(seed, _OWNER)
        self._seed, self._generator = _inputs.seed_generator(self.seed)

    def __call__(
        self, images: tf.Tensor, *, step: int | tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns the global and the local views of `images`.

        Args:
            images: A batch `[batch, height, width, channels]` or one image
                `[height, width, channels]`, as `ViewAugmenter` takes them:
                1 or 3 channels, static height and width, floating values in
                `[0, 1]` or integers rescaled by their dtype's maximum.
            step: Optional integer or scalar integer tensor; with `seed` it
                fixes the views. Defaults to `None`: the augmenter's
                generator draws the call's seed.

        Returns:
            `(global_views, local_views)`, float32 tensors with values in
            `[0, 1]`: `global_views` of shape
            `[batch, 2, global_size[0], global_size[1], channels]` and
            `local_views` of shape
            `[batch, n_local, local_size[0], local_size[1], channels]`
            (`[batch, 0, ...]` when `n_local` is 0); without the batch axis
            for one image. `global_views[:, 0]` is the first global view
            (always blurred by default), `global_views[:, 1]` the second.

        Raises:
            ValueError: If `images` has the wrong rank, channel count or dtype,
                or unknown height or width.
        """
        images = _inputs.checked_images(images, _OWNER, "crop boxes depend on them")
        single = images.shape.rank == 3
        if single:
            images = images[None]
        seed = _inputs.call_seed(self._generator, self._seed, step)

        def seed_for(operation: int, index: int) -> tf.Tensor:
            fold = tf.random.experimental.stateless_fold_in
            return fold(fold(seed, operation), index)

        global_views = self._views(
            images,
            self.global_size,
            self.global_crop_scale,
            2,
            _GLOBAL,
            self.global_blur_prob,
            self.global_solarize_prob,
            seed_for,
        )
        if self.n_local:
            local_views = self._views(
                images,
                self.local_size,
                self.local_crop_scale,
                self.n_local,
                _LOCAL,
                (self.local_blur_prob,),
                (self.local_solarize_prob,),
                seed_for,
            )
        else:
            local_views = tf.zeros(
                tf.concat([tf.shape(images)[:1], [0, *self.local_size, images.shape[-1]]], 0)
            )
            local_views.set_shape([images.shape[0], 0, *self.local_size, images.shape[-1]])
        if single:
            return global_views[0], local_views[0]
        return global_views, local_views

    def _views(
        self,
        images: tf.Tensor,
        size: tuple[int, int],
        scale: tuple[float, float],
        count: int,
        group: int,
        blur_prob: Sequence[float],
        solarize_prob: Sequence[float],
        seed_for: Callable[[int, int], tf.Tensor],
    ) -> tf.Tensor:
        """`[batch, count, *size, channels]` views; one probability per view, or one for all."""
        batch = tf.shape(images)[0]
        views = count * batch
        # View-major: view v of image i is entry v * batch + i. Each view's crop
        # has a seed of its own; the other transforms draw for all the views of
        # the group at once, blur and solarisation once per probability.
        first_view = 0 if group == _GLOBAL else 2
        boxes = tf.concat(
            [
                view_draws.crop_boxes(
                    batch,
                    images.shape[1:3],
                    size,
                    scale,
                    self.crop_ratio,
                    seed_for(_CROP, first_view + view),
                )
                for view in range(count)
            ],
            axis=0,
        )
        part_views = views // len(blur_prob)
        blur_draws = [
            view_draws.draw_gaussian_blur(
                part_views, self.blur_sigma, blur, seed_for(_BLUR, 2 * group + part)
            )
            for part, blur in enumerate(blur_prob)
        ]
        solarize_draws = [
            view_draws.bernoulli_mask(part_views, solarize, seed_for(_SOLARIZE, 2 * group + part))
            for part, solarize in enumerate(solarize_prob)
        ]
        jitter = None
        if self.jitter_prob > 0:
            jitter = view_draws.draw_color_jitter(
                views,
                self.brightness,
                self.contrast,
                self.saturation,
                self.hue,
                self.jitter_prob,
                seed_for(_JITTER, group),
            )
        draws = _pipeline.ViewDraws(
            boxes=boxes,
            source=tf.tile(tf.range(batch), [count]),
            flip=view_draws.bernoulli_mask(views, self.flip_prob, seed_for(_FLIP, group))
            if self.flip_prob > 0
            else None,
            jitter=jitter,
            grayscale=view_draws.bernoulli_mask(
                views, self.grayscale_prob, seed_for(_GRAYSCALE, group)
            )
            if self.grayscale_prob > 0
            else None,
            blur=tuple(tf.concat(draw, axis=0) for draw in zip(*blur_draws, strict=True))
            if max(blur_prob) > 0
            else None,
            solarize=tf.concat(solarize_draws, axis=0) if max(solarize_prob) > 0 else None,
        )
        kernel_size = tuple(
            image_ops.blur_kernel_size(side, self.blur_kernel_fraction) for side in size
        )
        x = _pipeline.make_views(
            images, draws, size, kernel_size, with_hue=self.hue > 0, each_image=self._each_image
        )
        x = tf.reshape(x, [count, -1, *size, images.shape[-1]])
        return tf.transpose(x, [1, 0, 2, 3, 4])

    # `None`: the default way of `_pipeline.make_views`; tests and benchmarks set it.
    _each_image: bool | None = None

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor arguments as plain Python values."""
        return {
            "global_size": list(self.global_size),
            "local_size": list(self.local_size),
            "n_local": self.n_local,
            "global_crop_scale": list(self.global_crop_scale),
            "local_crop_scale": list(self.local_crop_scale),
            "crop_ratio": list(self.crop_ratio),
            "flip_prob": self.flip_prob,
            "brightness": self.brightness,
            "contrast": self.contrast,
            "saturation": self.saturation,
            "hue": self.hue,
            "jitter_prob": self.jitter_prob,
            "grayscale_prob": self.grayscale_prob,
            "global_blur_prob": list(self.global_blur_prob),
            "local_blur_prob": self.local_blur_prob,
            "blur_sigma": list(self.blur_sigma),
            "blur_kernel_fraction": self.blur_kernel_fraction,
            "global_solarize_prob": list(self.global_solarize_prob),
            "local_solarize_prob": self.local_solarize_prob,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MultiCropAugmenter:
        """Creates an augmenter from `get_config()`'s output."""
        return cls(**config)

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"


def _check_global_probabilities(name: str, value: Any) -> tuple[float, float]:
    pair = "(first, second) of probabilities, one per global view"
    return _inputs.check_probability_pair(name, value, _OWNER, pair)


def _check_scale(name: str, value: Any) -> tuple[float, float]:
    scale = check_pair(name, value, low=0.0, high=1.0, owner=_OWNER)
    if scale[0] <= 0.0:
        raise ValueError(
            f"{_OWNER}: {name} must be (min, max) with 0 < min <= max <= 1, fractions of the "
            f"image area. Received: {name}={value!r}"
        )
    return scale
