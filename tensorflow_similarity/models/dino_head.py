"""DINO's projection head: an MLP, an L2-normalised bottleneck, a weight-normalised output."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_int
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.layers.metric_embedding import MetricEmbedding
from tensorflow_similarity.models.mlp_heads import check_positive

# DINO initialises its Linear layers with a truncated normal of standard deviation 0.02.
_KERNEL_STDDEV = 0.02


@keras.saving.register_keras_serializable(package="Similarity")
class WeightNormalizedDense(keras.layers.Layer):
    """A dense layer whose kernel columns have unit norm times a gain (weight normalisation).

    Computes `x @ (V / ||V||) * g (+ b)`, the norm taken over each of the
    `units` columns of the `[features, units]` kernel `V`: Salimans &
    Kingma's weight normalisation (https://arxiv.org/abs/1602.07868), as
    DINO's last layer (`torch.nn.utils.weight_norm` on a `Linear`). Only a
    column's direction counts, so the scale of `V` and of its initialiser
    makes no difference. With `normalize_scale=True` (DINO's
    `norm_last_layer=True`, its default) the gain `g` is fixed at 1 and the
    layer has no weight but `V`: on L2-normalised inputs its outputs are
    then cosine similarities, in `[-1, 1]`. With `normalize_scale=False` the
    gain is a trainable `[units]` weight, initialised to 1. Columns are
    normalised with the package's `l2_normalize` (in float32 under float16
    and bfloat16 policies).

    Args:
        units: Number of outputs, a positive integer.
        use_bias: Whether a bias is added. Defaults to `False`, as DINO.
        normalize_scale: `True` (default) fixes the gain at 1; `False` makes
            it a trainable per-unit weight initialised to 1.
        kernel_initializer: Initialiser of `V`. Defaults to
            `"glorot_uniform"`.
        bias_initializer: Initialiser of the bias. Defaults to `"zeros"`.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Raises:
        ValueError: If `units` is not a positive integer.
        TypeError: If `use_bias` or `normalize_scale` is not a bool.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.models.dino_head import WeightNormalizedDense
    >>> layer = WeightNormalizedDense(2)
    >>> layer.build((None, 2))
    >>> _ = layer.kernel.assign([[3.0, 0.0], [4.0, -2.0]])
    >>> y = layer(np.array([[1.0, 1.0]]))  # columns (0.6, 0.8) and (0, -1)
    >>> y.numpy().astype("float64").round(4).tolist()
    [[1.4, -1.0]]
    """

    def __init__(
        self,
        units: int,
        use_bias: bool = False,
        normalize_scale: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.units = check_int("units", units, minimum=1, owner=owner)
        self.use_bias = check_bool("use_bias", use_bias, owner=owner)
        self.normalize_scale = check_bool(
            "normalize_scale",
            normalize_scale,
            owner=owner,
            hint="True fixes the gain at 1 (DINO's norm_last_layer=True); False trains it.",
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.units),
            initializer=self.kernel_initializer,
        )
        self.gain = None
        if not self.normalize_scale:
            self.gain = self.add_weight(name="gain", shape=(self.units,), initializer="ones")
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(self.units,), initializer=self.bias_initializer
            )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        kernel = l2_normalize(self.kernel, axis=0)
        if self.gain is not None:
            kernel = kernel * self.gain
        outputs = tf.matmul(inputs, kernel)
        if self.bias is not None:
            outputs = outputs + self.bias
        return outputs

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return (*input_shape[:-1], self.units)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            units=self.units,
            use_bias=self.use_bias,
            normalize_scale=self.normalize_scale,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


def build_dino_head(
    input_dim: int,
    output_dim: int = 65536,
    hidden_dim: int = 2048,
    bottleneck_dim: int = 256,
    hidden_layers: int = 2,
    use_bn: bool = False,
    sync_bn: bool | SyncBatchNormPlugin = False,
    norm_last_layer: bool = True,
    name: str = "projector",
) -> keras.Model:
    """Builds DINO's projection head, for the student and (a copy) for the teacher.

    From Caron et al., "Emerging Properties in Self-Supervised Vision
    Transformers", ICCV 2021 (https://arxiv.org/abs/2104.14294), its
    `DINOHead`: `hidden_layers` times Dense(`hidden_dim`) then GELU (with
    batch norm before the GELU when `use_bn`), then Dense(`bottleneck_dim`)
    whose output is L2-normalised (`layers.MetricEmbedding`), then a
    `WeightNormalizedDense(output_dim)` without bias whose outputs are the
    logits over the `output_dim` prototypes that `DINOLoss` takes. Dense
    kernels start from a truncated normal of standard deviation 0.02 and
    biases from zero, as DINO's; GELU is the exact one (`erf`), as
    PyTorch's (Keras' `"gelu"`). `hidden_layers=0` maps the input straight to the bottleneck
    (DINO's `nlayers=1`).

    Under a float16 or bfloat16 policy (`mixed_float16`, `mixed_bfloat16`)
    the hidden layers follow it, and the bottleneck and the last layer
    compute in float32 (`dtype="float32"`), as Keras advises for the layer
    that feeds a softmax: the logits are then float32. In float16 the
    bottleneck's L2 normalisation treats a row of norm below 1e-3 as zero
    (`l2_normalize`'s float16 floor), leaving it unnormalised and without
    gradient, which at DINO's small initialisation cuts the backbone off;
    and the teacher's temperature (0.04) magnifies float16's rounding of the
    logits twenty-five times.

    Args:
        input_dim: Width of the backbone's representation.
        output_dim: Number `K` of prototypes (outputs). Defaults to 65536.
        hidden_dim: Width of the hidden layers. Defaults to 2048.
        bottleneck_dim: Width of the L2-normalised bottleneck. Defaults to 256.
        hidden_layers: Number of hidden layers, `>= 0`. Defaults to 2 (DINO's
            `nlayers=3`).
        use_bn: Whether the hidden layers have batch norm. Defaults to
            `False` (DINO's default for ViT).
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`, for the batch
            norm of `use_bn` (without it there is none to synchronise).
            Defaults to `False`.
        norm_last_layer: `True` (default) fixes the last layer's gain at 1
            (`WeightNormalizedDense(normalize_scale=True)`); `False` trains
            it, which DINO finds less stable.
        name: Model name (and its layers' prefix). Defaults to `"projector"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, output_dim]`, whose
        output is float32 under a float16 or bfloat16 policy.

    Raises:
        ValueError: For a non-positive width or a negative `hidden_layers`.
        TypeError: If `use_bn` or `norm_last_layer` is not a bool.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.models.dino_head import build_dino_head
    >>> head = build_dino_head(32, output_dim=16, hidden_dim=24, bottleneck_dim=8)
    >>> head(np.zeros((4, 32), "float32")).shape
    TensorShape([4, 16])
    """
    check_positive(
        input_dim=input_dim,
        output_dim=output_dim,
        hidden_dim=hidden_dim,
        bottleneck_dim=bottleneck_dim,
    )
    check_int("hidden_layers", hidden_layers, minimum=0, owner="build_dino_head")
    check_bool("use_bn", use_bn, owner="build_dino_head")
    check_bool("norm_last_layer", norm_last_layer, owner="build_dino_head")
    plugin = resolve_sync_bn(sync_bn)

    def dense_kwargs() -> dict[str, Any]:
        return {
            "kernel_initializer": keras.initializers.TruncatedNormal(stddev=_KERNEL_STDDEV),
            "bias_initializer": "zeros",
        }

    inputs = keras.Input((input_dim,), name=f"{name}_input")
    x = inputs
    for i in range(hidden_layers):
        x = keras.layers.Dense(hidden_dim, name=f"{name}_dense{i}", **dense_kwargs())(x)
        if use_bn:
            x = batch_norm_layer(plugin, name=f"{name}_bn{i}")(x)
        x = keras.layers.Activation("gelu", name=f"{name}_gelu{i}")(x)
    x = MetricEmbedding(
        bottleneck_dim, name=f"{name}_bottleneck", dtype=_float32_if_half(), **dense_kwargs()
    )(x)
    x = WeightNormalizedDense(
        output_dim,
        dtype=_float32_if_half(),
        normalize_scale=norm_last_layer,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=_KERNEL_STDDEV),
        name=f"{name}_last_layer",
    )(x)
    return keras.Model(inputs, x, name=name)


def _float32_if_half() -> str | None:
    """`"float32"` under a float16 or bfloat16 policy (the global one); `None` keeps the policy."""
    policy = keras.config.dtype_policy()
    return "float32" if policy.compute_dtype in ("float16", "bfloat16") else None
