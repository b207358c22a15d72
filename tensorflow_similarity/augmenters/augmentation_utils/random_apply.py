"""0.17's `random_apply`: a transform applied, or not, with a probability."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tensorflow_similarity.augmenters.augmentation_utils._seeds import stateless_seed

__all__ = ["random_apply"]


def random_apply(func: Callable[[Any], Any], p: float, x: Any, *, seed: Any = None) -> Any:
    """Returns `func(x)` with probability `p`, else `x`: one draw for all of `x`.

    Args:
        func: The transform.
        p: Probability of applying it.
        x: Its input (one image or a batch: the draw is shared).
        seed: `None` (TensorFlow's stateful generator, as 0.17), an int or a
            `[2]` int tensor (the draw is then a function of it).

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters.augmentation_utils.random_apply import random_apply
    >>> random_apply(lambda x: x + 1, p=1.0, x=tf.zeros([2])).numpy().tolist()
    [1.0, 1.0]
    """
    draw = tf.random.stateless_uniform([], stateless_seed(seed), dtype=tf.float32)
    return tf.cond(draw < tf.cast(p, tf.float32), lambda: func(x), lambda: x)
