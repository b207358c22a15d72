"""tensorflow-similarity 0.17's image augmentation functions, by 0.17's module paths.

`blur`, `color_jitter`, `cropping`, `flip`, `random_apply` and `solarize`
keep 0.17's function names, arguments and defaults, and run on
`augmenters.image_ops`' stateless per-image transforms. 0.17 drew its
randomness from TensorFlow's stateful generator; these functions do the same
by default (so `tf.random.set_seed` makes a run repeat, as in 0.17), and each
random one also takes a keyword-only `seed` (an int or a `[2]` int tensor)
that makes its result a pure function of its inputs. Where a function's
result differs from 0.17's beyond the random draws, its docstring says how.
New code uses `ViewAugmenter` or `image_ops` directly.
"""

from tensorflow_similarity.augmenters.augmentation_utils import (
    blur,
    color_jitter,
    cropping,
    flip,
    random_apply,
    solarize,
)

__all__ = ["blur", "color_jitter", "cropping", "flip", "random_apply", "solarize"]
