"""DINO's multi-crop view pipeline (Caron et al., 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorflow_similarity._validation import check_bool
from tensorflow_similarity.augmenters.multicrop import MultiCropAugmenter

__all__ = ["multicrop_augmenter"]

# The arguments that `multicrop_augmenter(flip=False)` and `color=False` set, and so refuse.
_FLIP_ARGUMENTS = ("flip_prob",)
_COLOR_ARGUMENTS = (
    "brightness",
    "contrast",
    "saturation",
    "hue",
    "jitter_prob",
    "grayscale_prob",
    "global_solarize_prob",
    "local_solarize_prob",
)


def multicrop_augmenter(
    global_size: int | Sequence[int] = 224,
    local_size: int | Sequence[int] = 96,
    n_local: int = 8,
    *,
    flip: bool = True,
    color: bool = True,
    seed: int | None = None,
    **overrides: Any,
) -> MultiCropAugmenter:
    """Returns DINO's multi-crop augmentation pipeline, with flips and colour optional.

    As "Emerging Properties in Self-Supervised Vision Transformers" (Caron et
    al., ICCV 2021) and its reference code: two global crops (area
    `(0.4, 1.0)`) and `n_local` local crops (area `(0.05, 0.4)`), each with a
    horizontal flip (p=0.5), colour jitter (brightness and contrast 0.4,
    saturation 0.2, hue 0.1; p=0.8) and greyscale (p=0.2); Gaussian blur
    (sigma `(0.1, 2.0)`) with p=1.0 on the first global view, 0.1 on the
    second and 0.5 on the local views; solarisation with p=0.2 on the second
    global view only. `flip=False` and `color=False` drop the flips and the
    photometric transforms (jitter, greyscale, solarisation), for line
    drawings such as glyphs; blur and crops remain.

    Args:
        global_size: Side of the global views, an integer or
            `(height, width)`. Defaults to `224` (DINO's); `32` for 32-pixel
            images.
        local_size: Side of the local views. Defaults to `96` (DINO's); `16`
            for 32-pixel images, `14` for 28-pixel glyphs.
        n_local: Number of local views. Defaults to `8` (DINO's).
        flip: Whether views are flipped at random. Defaults to `True`.
        color: Whether views get colour jitter, greyscale and solarisation.
            Defaults to `True`.
        seed: Non-negative integer seed. Defaults to `None` (random).
        **overrides: Any other `MultiCropAugmenter` argument, replacing
            DINO's value.

    Returns:
        A `MultiCropAugmenter`.

    Raises:
        TypeError: If `flip` or `color` is not a bool.
        ValueError: If an argument is out of range, or an override sets what
            `flip=False` or `color=False` turns off.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import multicrop_augmenter
    >>> augmenter = multicrop_augmenter(28, 14, n_local=2, flip=False, color=False, seed=0)
    >>> global_views, local_views = augmenter(tf.random.uniform((4, 28, 28, 1)))
    >>> local_views.shape
    TensorShape([4, 2, 14, 14, 1])
    """
    check_bool("flip", flip, owner="multicrop_augmenter")
    check_bool("color", color, owner="multicrop_augmenter")
    for switch, on, names in (("flip", flip, _FLIP_ARGUMENTS), ("color", color, _COLOR_ARGUMENTS)):
        clashing = sorted(set(names) & set(overrides))
        if not on and clashing:
            raise ValueError(
                f"multicrop_augmenter: {switch}=False turns off what {', '.join(clashing)} "
                f"set. Pass {switch}=True with the override, or drop the override."
            )
    arguments: dict[str, Any] = {
        "global_crop_scale": (0.4, 1.0),
        "local_crop_scale": (0.05, 0.4),
        "crop_ratio": (3 / 4, 4 / 3),
        "flip_prob": 0.5 if flip else 0.0,
        "brightness": 0.4,
        "contrast": 0.4,
        "saturation": 0.2,
        "hue": 0.1,
        "jitter_prob": 0.8 if color else 0.0,
        "grayscale_prob": 0.2 if color else 0.0,
        "global_blur_prob": (1.0, 0.1),
        "local_blur_prob": 0.5,
        "blur_sigma": (0.1, 2.0),
        "global_solarize_prob": (0.0, 0.2) if color else (0.0, 0.0),
        "local_solarize_prob": 0.0,
    }
    arguments.update(overrides)
    return MultiCropAugmenter(global_size, local_size, n_local, seed=seed, **arguments)
