"""Two random views of line drawings (glyphs, handwriting): affine warps and stroke width."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.augmenters._inputs import to_float32
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

_OWNER = "GlyphAugmenter"


@keras.saving.register_keras_serializable(package="Similarity")
class GlyphAugmenter(ViewAugmenter):
    """Makes two views of each drawing by a random affine warp and stroke width.

    Colour jitter, crops and flips suit photographs, not line drawings: a
    crop cuts strokes away and a mirrored letter is another letter. Each view
    here is a random affine warp of the whole image about its centre
    (rotation, scale, shear, shift, drawn per image; the background is
    filled with 0, so the drawing should be light on a black background, as
    `load_glyphs` draws it), then a random change of stroke width: a blend
    of the image with its 3x3 grey dilation (thicker) or erosion (thinner).
    The seeding and call contract are `ViewAugmenter`'s (`step=` makes the
    views a pure function of `(seed, step)`).

    Args:
        image_size: Output size, an integer or `(height, width)`. Defaults to
            `None`: the input's size.
        rotation: Largest rotation, in radians, either way. Defaults to
            `0.15` (about 9 degrees).
        scale: Largest log scale factor either way: factors in
            `[exp(-scale), exp(scale)]`. Defaults to `0.15`.
        shear: Largest horizontal shear factor either way. Defaults to `0.15`.
        shift: Largest shift, as a fraction of the side, in each direction.
            Defaults to `0.1`.
        stroke: Largest blend weight towards the dilated (positive draw) or
            eroded (negative draw) image, in `[0, 1]`. Defaults to `0.5`.
        seed: Non-negative integer seed. Defaults to `None`: a random seed.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import GlyphAugmenter
    >>> augmenter = GlyphAugmenter(seed=0)
    >>> view1, view2 = augmenter(tf.zeros((4, 16, 16, 1)), step=3)
    >>> view1.shape
    TensorShape([4, 16, 16, 1])
    """

    def __init__(
        self,
        image_size: int | Sequence[int] | None = None,
        rotation: float = 0.15,
        scale: float = 0.15,
        shear: float = 0.15,
        shift: float = 0.1,
        stroke: float = 0.5,
        seed: int | None = None,
    ) -> None:
        super().__init__(image_size=image_size, seed=seed)
        self.rotation = check_number("rotation", rotation, low=0.0, high=3.15, owner=_OWNER)
        self.scale = check_number("scale", scale, low=0.0, high=2.0, owner=_OWNER)
        self.shear = check_number("shear", shear, low=0.0, high=1.0, owner=_OWNER)
        self.shift = check_number("shift", shift, low=0.0, high=0.5, owner=_OWNER)
        self.stroke = check_number("stroke", stroke, low=0.0, high=1.0, owner=_OWNER)

    def _two_views(
        self, images: tf.Tensor, size: tuple[int, int], seed: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        images = to_float32(images)
        fold = tf.random.experimental.stateless_fold_in
        view1, view2 = (self._augment(images, size, fold(seed, view)) for view in (0, 1))
        return view1, view2

    def _augment(self, images: tf.Tensor, size: tuple[int, int], seed: tf.Tensor) -> tf.Tensor:
        batch = tf.shape(images)[0]
        height, width = images.shape[1], images.shape[2]

        def uniform(op: int, limit: float) -> tf.Tensor:
            return tf.random.stateless_uniform(
                [batch], tf.random.experimental.stateless_fold_in(seed, op), -limit, limit
            )

        angle = uniform(0, self.rotation)
        zoom = tf.exp(uniform(1, self.scale))
        shear = uniform(2, self.shear)
        shift_x = uniform(3, self.shift) * width
        shift_y = uniform(4, self.shift) * height
        # The transform maps each output pixel (x, y) to the input pixel it samples:
        # [x_in, y_in] = A [x, y] + b, with A a rotation by -angle, scaled by 1 / zoom and
        # sheared, about the image centre, then shifted.
        cos, sin = tf.cos(angle) / zoom, tf.sin(angle) / zoom
        a00, a01, a10, a11 = cos, -sin + shear, sin, cos
        centre_x, centre_y = (width - 1) / 2, (height - 1) / 2
        b0 = centre_x - a00 * centre_x - a01 * centre_y - shift_x
        b1 = centre_y - a10 * centre_x - a11 * centre_y - shift_y
        zeros = tf.zeros_like(angle)
        transform = tf.stack([a00, a01, b0, a10, a11, b1, zeros, zeros], axis=1)
        x = keras.ops.image.affine_transform(
            images, transform, interpolation="bilinear", fill_mode="constant", fill_value=0
        )
        weight = uniform(5, self.stroke)[:, None, None, None]
        thicker = tf.nn.max_pool2d(x, 3, 1, "SAME")
        thinner = -tf.nn.max_pool2d(-x, 3, 1, "SAME")
        x = tf.where(weight > 0, x + weight * (thicker - x), x - weight * (thinner - x))
        if (height, width) != tuple(size):
            x = tf.image.resize(x, size, antialias=True)
        return tf.clip_by_value(x, 0.0, 1.0)

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor arguments as plain Python values."""
        return {
            "image_size": None if self.image_size is None else list(self.image_size),
            "rotation": self.rotation,
            "scale": self.scale,
            "shear": self.shear,
            "shift": self.shift,
            "stroke": self.stroke,
            "seed": self.seed,
        }
