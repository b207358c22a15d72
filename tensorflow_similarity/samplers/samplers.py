"""0.17's module path of `Sampler`, and its annotations `Batch` and `Scheduler`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity.samplers.sampler import Sampler

# 0.17's annotations: a warm-up scheduler, and what one batch's x may be.
Scheduler = Callable[[Any], Any]
Batch = (
    np.ndarray
    | list[np.ndarray]
    | tf.Tensor
    | list[tf.Tensor]
    | Mapping[str, np.ndarray | tf.Tensor]
)

__all__ = ["Batch", "Sampler", "Scheduler"]
