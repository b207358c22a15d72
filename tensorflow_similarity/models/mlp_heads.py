"""The MLP heads the self-supervised algorithms put on a backbone: projectors and predictors."""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from tensorflow_similarity._validation import check_choice, check_int
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)

PROJECTOR_WIDTHS = ("scaled", "paper")
# The papers sized their heads for ResNet-50's 2048-d representation.
_PAPER_INPUT_DIM = 2048
# Scaled widths stay at least this wide (or the paper's width, when narrower).
_MIN_SCALED_WIDTH = 256


@dataclasses.dataclass(frozen=True)
class ProjectorSpec:
    """A paper's projector: (Dense without bias, BN, ReLU) x `hidden_layers`, then the output.

    Attributes:
        hidden_layers: Number of hidden layers.
        hidden_dim: Hidden width, for a 2048-d ResNet-50 representation.
        output_dim: Output width, for a 2048-d ResNet-50 representation.
        output_bn: The output layer's batch norm: `"none"` (no affine),
            `"center"` (offset only) or `None` (no batch norm; the output
            Dense then has a bias).
    """

    hidden_layers: int
    hidden_dim: int
    output_dim: int
    output_bn: str | None

    def widths(self, input_dim: int, projector_width: str = "scaled") -> tuple[int, int]:
        """Returns `(hidden_dim, output_dim)` for a backbone of `input_dim` features.

        `"paper"` gives the paper's widths, chosen for a 2048-d ResNet-50.
        `"scaled"` keeps the paper's ratio of each width to the
        representation: `width * input_dim / 2048`, but at least
        `min(width, 256)`. On a 2048-d backbone both are the paper's.

        Raises:
            ValueError: For an unknown `projector_width` or a non-positive
                `input_dim`.
        """
        check_choice("projector_width", projector_width, PROJECTOR_WIDTHS)
        check_positive(input_dim=input_dim)
        if projector_width == "paper":
            return self.hidden_dim, self.output_dim

        def scaled(width: int) -> int:
            return max(min(width, _MIN_SCALED_WIDTH), round(width * input_dim / _PAPER_INPUT_DIM))

        return scaled(self.hidden_dim), scaled(self.output_dim)


def mlp_projector(
    input_dim: int,
    spec: ProjectorSpec,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "projector",
    activation: Any = "relu",
) -> keras.Model:
    """Builds the projector `spec` describes, at `spec`'s own widths.

    Args:
        input_dim: Width of the backbone's representation.
        spec: Depth, widths and output batch norm.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name (and its layers' prefix). Defaults to `"projector"`.
        activation: Activation of the hidden layers. Defaults to `"relu"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, spec.output_dim]`.

    Raises:
        ValueError: For a non-positive width.
    """
    check_positive(input_dim=input_dim, hidden_dim=spec.hidden_dim, output_dim=spec.output_dim)
    plugin = resolve_sync_bn(sync_bn)
    inputs = keras.Input((input_dim,), name=f"{name}_input")
    x = inputs
    for i in range(spec.hidden_layers):
        x = keras.layers.Dense(spec.hidden_dim, use_bias=False, name=f"{name}_dense{i}")(x)
        x = batch_norm_layer(plugin, name=f"{name}_bn{i}")(x)
        x = _activation(activation, f"{name}_relu{i}")(x)
    x = keras.layers.Dense(
        spec.output_dim, use_bias=spec.output_bn is None, name=f"{name}_dense_out"
    )(x)
    if spec.output_bn is not None:
        x = batch_norm_layer(
            plugin, center=spec.output_bn == "center", scale=False, name=f"{name}_bn_out"
        )(x)
    return keras.Model(inputs, x, name=name)


def build_predictor(
    input_dim: int,
    hidden_dim: int = 512,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "predictor",
    *,
    activation: Any = "relu",
    output_bn: str | None = None,
) -> keras.Model:
    """Builds SimSiam's predictor: Dense without bias, BN, ReLU, then Dense back to `input_dim`.

    Args:
        input_dim: Projection width (also the output width).
        hidden_dim: Bottleneck width (the paper uses a quarter of `input_dim`).
            Defaults to 512.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name. Defaults to `"predictor"`.
        activation: Activation of the hidden layer. Defaults to `"relu"`.
        output_bn: `None` (default): the output Dense has a bias and no batch
            norm; `"none"`: a batch norm without affine after a Dense without
            bias (MoCo v3's predictor).

    Returns:
        A Functional model `[batch, input_dim] -> [batch, input_dim]`.

    Raises:
        ValueError: For a non-positive width.
    """
    check_positive(input_dim=input_dim, hidden_dim=hidden_dim)
    plugin = resolve_sync_bn(sync_bn)
    inputs = keras.Input((input_dim,), name=f"{name}_input")
    x = keras.layers.Dense(hidden_dim, use_bias=False, name=f"{name}_dense0")(inputs)
    x = batch_norm_layer(plugin, name=f"{name}_bn0")(x)
    x = _activation(activation, f"{name}_relu0")(x)
    x = keras.layers.Dense(input_dim, use_bias=output_bn is None, name=f"{name}_dense_out")(x)
    if output_bn is not None:
        x = batch_norm_layer(
            plugin, center=output_bn == "center", scale=False, name=f"{name}_bn_out"
        )(x)
    return keras.Model(inputs, x, name=name)


def check_positive(**widths: int) -> None:
    """Raises `ValueError` naming the first width that is not a positive int."""
    for key, value in widths.items():
        check_int(key, value, minimum=1)


def _activation(activation: Any, name: str) -> keras.layers.Layer:
    if isinstance(activation, str) and activation == "relu":
        return keras.layers.ReLU(name=name)
    return keras.layers.Activation(activation)
