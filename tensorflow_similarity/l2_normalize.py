"""Rows scaled to unit L2 norm, with a bounded gradient: the one normalisation of the package.

`tf.math.l2_normalize` gives a row of norm `r` the incoming gradient times up
to `1 / r`, and a zero row the incoming gradient times `1 / sqrt(1e-12)`, a
million: one dead row then dominates a step, and in float16 its gradient is
infinite (what turned 0.17's float16 integration test into NaN weights).
`l2_normalize` has the same values, and a row whose squared norm is below
the floor has no direction and gets no gradient, as a ReLU at zero. Every
site that normalises rows (the cosine distance, the losses, the layers, the
search and kNN) calls it, so they agree to the bit.
"""

from __future__ import annotations

import tensorflow as tf

# As tf.math.l2_normalize: a zero row stays zero instead of becoming NaN.
MIN_SQUARED_NORM = 1e-12
# The gradient through a row of norm r above the floor is the incoming one times up to 1 / r:
# 1e6 at the floor above, past float16's largest value (65504) for any incoming gradient above
# 0.07. In float16 the floor is 1e-6 (a norm of 1e-3, below float16's resolution of a unit
# vector's components).
MIN_SQUARED_NORM_FLOAT16 = 1e-6


def l2_normalize(x: tf.Tensor, axis: int = -1) -> tf.Tensor:
    """Scales `x` to unit L2 norm along `axis`; a row below the floor gets no gradient.

    Computes `x / sqrt(max(sum(x ** 2), floor))` with `floor` 1e-12 (1e-6
    for float16), in float32 for float16 and bfloat16 inputs and in the
    input's dtype otherwise, and returns the input's dtype. The values are
    those of `tf.math.l2_normalize`; a row whose squared norm is below the
    floor (a zero row) stays as it is and gets a zero gradient instead of the
    incoming one times `1 / sqrt(floor)`.

    Args:
        x: A floating-point tensor.
        axis: The axis that is normalised. Defaults to the last.

    Returns:
        A tensor of the shape and dtype of `x`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.l2_normalize import l2_normalize
    >>> x = tf.constant([[3.0, 4.0], [0.0, 0.0]])
    >>> with tf.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = l2_normalize(x)
    ...     loss = tf.reduce_sum(y * [1.0, 2.0])
    >>> y.numpy().astype("float64").round(3).tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    >>> tape.gradient(loss, x).numpy().astype("float64").round(3).tolist()
    [[-0.064, 0.048], [0.0, 0.0]]
    """
    x = tf.convert_to_tensor(x)
    dtype = x.dtype
    floor = MIN_SQUARED_NORM_FLOAT16 if dtype == tf.float16 else MIN_SQUARED_NORM
    z = tf.cast(x, tf.float32) if dtype in (tf.float16, tf.bfloat16) else x
    squared_norm = tf.reduce_sum(tf.square(z), axis=axis, keepdims=True)
    normalised = z * tf.math.rsqrt(tf.maximum(squared_norm, tf.cast(floor, z.dtype)))
    # `where` selects, so an infinite incoming gradient (a float32 loss's gradient cast to
    # float16) cannot leak into a row below the floor either.
    normalised = tf.where(squared_norm < floor, tf.stop_gradient(normalised), normalised)
    return tf.cast(normalised, dtype)
