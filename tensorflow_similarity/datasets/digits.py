"""scikit-learn's handwritten digits: 1,797 real 8x8 greyscale images of 10 classes."""

from __future__ import annotations

import numpy as np


def load_digits_images() -> tuple[np.ndarray, np.ndarray, list[str], str]:
    """scikit-learn's digits as RGB images in `[0, 1]`, their labels, class names and source."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Pixel values are counts 0..16 of the 4x4 blocks each 8x8 pixel summarises.
    images = (digits.images[..., None] / 16.0).astype(np.float32)
    images = np.repeat(images, 3, axis=-1)
    labels = digits.target.astype(np.int32)
    names = [str(c) for c in range(10)]
    return images, labels, names, "scikit-learn digits (1,797 8x8 images, 10 classes)"
