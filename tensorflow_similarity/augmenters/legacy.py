"""tensorflow-similarity 0.17's augmenter classes, as thin classes over `ViewAugmenter`.

0.17 called an augmenter as `augmenter(x, y, num_views, is_warmup)` and got a
list of `num_views` batches of views; these classes keep that call and their
0.17 constructor arguments, so 0.17 code runs unchanged, while the
transforms are `ViewAugmenter`'s (torchvision's). They live in one module
because they are one compatibility layer; new code uses `ViewAugmenter` and
`simclr_augmenter` / `barlow_augmenter`, which return two views per call.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_choice, check_number
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter


class Augmenter(abc.ABC):
    """Base of 0.17's augmenters: `augment(x, y, num_views, is_warmup) -> list of views`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.augmenters import Augmenter
    >>> class Identity(Augmenter):
    ...     def augment(self, x, y=None, num_augmentations_per_example=2, is_warmup=True):
    ...         return [x] * num_augmentations_per_example
    >>> views = Identity()(np.zeros((4, 8, 8, 3)), None, 2, False)
    >>> len(views), views[0].shape
    (2, (4, 8, 8, 3))
    """

    @abc.abstractmethod
    def augment(
        self,
        x: Any,
        y: Any = None,
        num_augmentations_per_example: int = 2,
        is_warmup: bool = True,
    ) -> list[tf.Tensor]:
        """Returns `num_augmentations_per_example` augmented copies of the batch `x`.

        Args:
            x: A batch of images.
            y: Labels, unused by the built-in augmenters.
            num_augmentations_per_example: How many views of each image.
            is_warmup: Unused by the built-in augmenters.

        Returns:
            A list of `num_augmentations_per_example` batches of views.
        """

    def __call__(
        self,
        x: Any,
        y: Any = None,
        num_augmentations_per_example: int = 2,
        is_warmup: bool = True,
    ) -> list[tf.Tensor]:
        return self.augment(x, y, num_augmentations_per_example, is_warmup)

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor's arguments, for `from_config`.

        The built-in augmenters record every argument they were given (an
        unseeded augmenter records `seed=None`, so its copy draws other views).
        A subclass that takes arguments records them in `self._config` or
        overrides this method.

        Raises:
            NotImplementedError: For a subclass that records no arguments.
        """
        config = getattr(self, "_config", None)
        if config is None:
            raise NotImplementedError(
                f"{type(self).__name__} does not record its arguments: set self._config to the "
                "constructor's arguments in __init__, or override get_config()."
            )
        return dict(config)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Augmenter:
        """Builds the augmenter from `get_config()`'s output."""
        return cls(**config)


def _check_num_views(num_views: Any, name: str = "num_augmentations_per_example") -> int:
    if isinstance(num_views, bool) or not isinstance(num_views, int) or num_views < 1:
        raise ValueError(f"{name} must be a positive integer. Received: {num_views!r}")
    return num_views


def _views(augmenter: ViewAugmenter, images: tf.Tensor, num_views: int) -> list[tf.Tensor]:
    """`num_views` independent views, from as many two-view calls as it takes."""
    views: list[tf.Tensor] = []
    for _ in range(math.ceil(num_views / 2)):
        views.extend(augmenter(images))
    return views[:num_views]


class SimCLRAugmenter(Augmenter):
    """0.17's SimCLR augmenter: SimCLR's training (or evaluation) transform of each view.

    Inputs are divided by 255 whatever their dtype, as in 0.17: feed `[0, 255]`
    images. In training, each view is a random resized crop to
    `(height, width)` (when `crop`), a horizontal flip (p=0.5, when `flip`) and
    colour jitter of strength `jitter_stength` (p=0.8) with greyscale (p=0.2),
    when `color_distort`; no blur, as 0.17. In evaluation
    (`is_training=False`) every view is the same central crop of
    `eval_crop_proportion` of the side, resized.

    Differences from 0.17: the transforms are `ViewAugmenter`'s (torchvision's
    colour jitter, multiplicative brightness: `version="v2"` only); `num_cpu`
    is accepted and unused (the batch is transformed at once).

    Args:
        height: Output height.
        width: Output width.
        is_training: Random training views (default) or evaluation crops.
        color_distort: Whether to jitter colours. Defaults to `True`.
        jitter_stength: Colour strength `s` (brightness, contrast, saturation
            `0.8 s`, hue `0.2 s`). Defaults to `1.0`. (0.17's spelling.)
        crop: Whether to crop (training: random resized crop; evaluation:
            central crop). Defaults to `True`.
        eval_crop_proportion: Side fraction of the evaluation crop. Defaults
            to `0.875`.
        flip: Whether to flip horizontally. Defaults to `True`.
        version: `"v2"` (default), SimCLR v2's multiplicative brightness.
        num_cpu: Unused. Defaults to `None`.
        seed: Optional seed of the views, keyword-only (see `ViewAugmenter`).

    Raises:
        ValueError: For a bad size, strength or proportion, or `version="v1"`
            (SimCLR v1's additive brightness is not implemented).

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.augmenters import SimCLRAugmenter
    >>> uint8_images = np.zeros((4, 40, 40, 3), dtype=np.uint8)
    >>> augmenter = SimCLRAugmenter(32, 32)
    >>> view1, view2 = augmenter(uint8_images, None, 2, False)
    >>> view1.shape
    TensorShape([4, 32, 32, 3])
    """

    def __init__(
        self,
        height: int,
        width: int,
        is_training: bool = True,
        color_distort: bool = True,
        jitter_stength: float = 1.0,
        crop: bool = True,
        eval_crop_proportion: float = 0.875,
        flip: bool = True,
        version: str = "v2",
        num_cpu: int | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        self._config = {
            "height": height,
            "width": width,
            "is_training": is_training,
            "color_distort": color_distort,
            "jitter_stength": jitter_stength,
            "crop": crop,
            "eval_crop_proportion": eval_crop_proportion,
            "flip": flip,
            "version": version,
            "num_cpu": num_cpu,
            "seed": seed,
        }
        owner = type(self).__name__
        check_choice(
            "version",
            version,
            ("v2",),
            owner=owner,
            hint="(SimCLR v1's additive brightness is not implemented; v2's multiplicative "
            "one is torchvision's).",
        )
        for name, value in (
            ("is_training", is_training),
            ("color_distort", color_distort),
            ("crop", crop),
            ("flip", flip),
        ):
            check_bool(name, value, owner=owner)
        strength = check_number("jitter_stength", jitter_stength, low=0, owner=owner)
        self.eval_crop_proportion = check_number(
            "eval_crop_proportion", eval_crop_proportion, positive=True, high=1.0, owner=owner
        )
        self.height, self.width = height, width
        self.is_training = is_training
        self.color_distort, self.jitter_stength = color_distort, strength
        self.crop, self.flip, self.version, self.num_cpu = crop, flip, version, num_cpu
        self._augmenter = ViewAugmenter(
            image_size=(height, width),
            crop_scale=(0.08, 1.0) if crop else (1.0, 1.0),
            flip_prob=0.5 if flip else 0.0,
            brightness=0.8 * strength,
            contrast=0.8 * strength,
            saturation=0.8 * strength,
            hue=min(0.5, 0.2 * strength),
            jitter_prob=0.8 if color_distort else 0.0,
            grayscale_prob=0.2 if color_distort else 0.0,
            blur_prob=0.0,
            seed=seed,
        )

    def augment(
        self,
        x: Any,
        y: Any = None,
        num_views: int = 2,
        is_warmup: bool = True,
    ) -> list[tf.Tensor]:
        """Returns `num_views` views of the batch `x` (0.17's argument names)."""
        num_views = _check_num_views(num_views, "num_views")
        images = tf.cast(tf.convert_to_tensor(x), tf.float32) / 255.0
        if self.is_training:
            return _views(self._augmenter, images, num_views)
        if self.crop:
            images = tf.image.central_crop(images, self.eval_crop_proportion)
        view = tf.clip_by_value(tf.image.resize(images, (self.height, self.width)), 0.0, 1.0)
        return [view] * num_views


class BarlowAugmenter(Augmenter):
    """0.17's Barlow Twins augmenter, with its arguments, the same pipeline on every view.

    Each view is a random resized crop to `(height, width)`, a flip, colour
    jitter with greyscale, Gaussian blur and solarisation, each with its
    probability. Inputs are floats in `[0, 1]` (0.17 did not rescale; integer
    images are rescaled by their dtype's maximum here).

    Differences from 0.17: brightness is multiplicative (torchvision's, 0.17's
    was additive); solarisation inverts values at or above 0.5 (0.17 compared
    `[0, 1]` pixels with `solarize_thresh=10` and so never solarised), so the
    `solarize_pixel_*` and `solarize_thresh` arguments keep only their
    defaults; `num_augmentations_per_example` is honoured (0.17 always made 2);
    `num_cpu` is unused. For the paper's asymmetric pipeline use
    `barlow_augmenter`.

    Args:
        width: Output width (0.17's order: width first).
        height: Output height.
        flip_probability: Defaults to `0.5`.
        brightness_multiplier: Brightness strength. Defaults to `0.8`.
        contrast_multiplier: Defaults to `0.6`.
        saturation_multiplier: Defaults to `0.6`.
        hue_multiplier: Maximum hue shift in turns. Defaults to `0.2`.
        jitter_probability: Defaults to `0.8`.
        greyscale_probability: Defaults to `0.2`.
        blur_probability: Defaults to `0.2`.
        blur_min_sigma: Defaults to `0` (no blur at the low end).
        blur_max_sigma: Defaults to `1`.
        solarize_probability: Defaults to `0.2`.
        solarize_pixel_min: Only `0`.
        solarize_pixel_max: Only `255`.
        solarize_thresh: Only `10`.
        num_cpu: Unused. Defaults to `None`.
        seed: Optional seed of the views, keyword-only (see `ViewAugmenter`).

    Raises:
        ValueError: For an out-of-range argument or a non-default
            `solarize_pixel_min`, `solarize_pixel_max` or `solarize_thresh`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import BarlowAugmenter
    >>> augmenter = BarlowAugmenter(32, 32)
    >>> view1, view2 = augmenter(tf.random.uniform((4, 32, 32, 3)))
    >>> view1.shape
    TensorShape([4, 32, 32, 3])
    """

    def __init__(
        self,
        width: int,
        height: int,
        flip_probability: float = 0.5,
        brightness_multiplier: float = 0.8,
        contrast_multiplier: float = 0.6,
        saturation_multiplier: float = 0.6,
        hue_multiplier: float = 0.2,
        jitter_probability: float = 0.8,
        greyscale_probability: float = 0.2,
        blur_probability: float = 0.2,
        blur_min_sigma: float = 0,
        blur_max_sigma: float = 1,
        solarize_probability: float = 0.2,
        solarize_pixel_min: int = 0,
        solarize_pixel_max: int = 255,
        solarize_thresh: int = 10,
        num_cpu: int | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        for name, value, default in (
            ("solarize_pixel_min", solarize_pixel_min, 0),
            ("solarize_pixel_max", solarize_pixel_max, 255),
            ("solarize_thresh", solarize_thresh, 10),
        ):
            if value != default:
                raise ValueError(
                    f"BarlowAugmenter: {name} keeps only its default ({default}); the "
                    "solarisation inverts [0, 1] values at or above 0.5. Received: "
                    f"{name}={value!r}"
                )
        self._config = {
            "width": width,
            "height": height,
            "flip_probability": flip_probability,
            "brightness_multiplier": brightness_multiplier,
            "contrast_multiplier": contrast_multiplier,
            "saturation_multiplier": saturation_multiplier,
            "hue_multiplier": hue_multiplier,
            "jitter_probability": jitter_probability,
            "greyscale_probability": greyscale_probability,
            "blur_probability": blur_probability,
            "blur_min_sigma": blur_min_sigma,
            "blur_max_sigma": blur_max_sigma,
            "solarize_probability": solarize_probability,
            "num_cpu": num_cpu,
            "seed": seed,
        }
        self.width, self.height = width, height
        self.num_cpu = num_cpu
        # A zero sigma is no blur; ViewAugmenter wants a positive minimum, and a tiny
        # one gives a kernel that is 1 at the centre and 0 elsewhere.
        min_sigma = max(
            check_number("blur_min_sigma", blur_min_sigma, low=0, owner="BarlowAugmenter"), 1e-6
        )
        self._augmenter = ViewAugmenter(
            image_size=(height, width),
            flip_prob=flip_probability,
            brightness=brightness_multiplier,
            contrast=contrast_multiplier,
            saturation=saturation_multiplier,
            hue=hue_multiplier,
            jitter_prob=jitter_probability,
            grayscale_prob=greyscale_probability,
            blur_prob=blur_probability,
            blur_sigma=(min_sigma, max(min_sigma, blur_max_sigma)),
            solarize_prob=solarize_probability,
            seed=seed,
        )

    def augment(
        self,
        x: Any,
        y: Any = None,
        num_augmentations_per_example: int = 2,
        is_warmup: bool = True,
    ) -> list[tf.Tensor]:
        num_views = _check_num_views(num_augmentations_per_example)
        return _views(self._augmenter, tf.convert_to_tensor(x), num_views)


class ContrastiveAugmenter(Augmenter):
    """0.17's augmenter of a user function: each view applies `process` to every image.

    Args:
        process: `image -> view`, a TensorFlow function of one image.
        num_cpu: `tf.map_fn`'s `parallel_iterations`. Defaults to `None`.

    Raises:
        TypeError: If `process` is not callable.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import ContrastiveAugmenter
    >>> augmenter = ContrastiveAugmenter(tf.image.random_flip_left_right)
    >>> views = augmenter(tf.random.uniform((4, 8, 8, 3)), None, 3, False)
    >>> len(views), views[0].shape
    (3, TensorShape([4, 8, 8, 3]))
    """

    def __init__(self, process: Callable[[tf.Tensor], tf.Tensor], num_cpu: int | None = None):
        if not callable(process):
            raise TypeError(
                f"ContrastiveAugmenter needs a callable process(image) -> view. "
                f"Received: {process!r}"
            )
        self.process = process
        self.num_cpu = num_cpu

    def get_config(self) -> dict[str, Any]:
        """Returns `process` serialised by Keras, and `num_cpu`.

        `from_config` finds `process` again only when it is registered with
        `keras.saving.register_keras_serializable` (a lambda or an unregistered
        function cannot be rebuilt by name).
        """
        return {
            "process": keras.saving.serialize_keras_object(self.process),
            "num_cpu": self.num_cpu,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ContrastiveAugmenter:
        """Builds the augmenter, deserialising `process` with Keras (safe mode)."""
        config = dict(config)
        config["process"] = keras.saving.deserialize_keras_object(config["process"])
        return cls(**config)

    def augment(
        self,
        x: Any,
        y: Any = None,
        num_views: int = 2,
        is_warmup: bool = True,
    ) -> list[tf.Tensor]:
        """Returns `num_views` views of the batch `x` (0.17's argument names)."""
        num_views = _check_num_views(num_views, "num_views")
        images = tf.convert_to_tensor(x)
        return [
            tf.map_fn(self.process, images, parallel_iterations=self.num_cpu)
            for _ in range(num_views)
        ]
