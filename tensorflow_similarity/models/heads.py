"""Projector and predictor heads of the self-supervised papers."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity._validation import check_choice, check_int
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)

ALGORITHMS = ("simsiam", "simclr", "barlow", "vicreg")

# Depth, widths and the output layer's batch norm ("none": no affine, "center": offset
# only, None: no batch norm) of each paper's reference implementation (ImageNet sizes).
_PROJECTORS = {
    # SimSiam: 3 layers, BN on every layer including the output, whose BN has no affine.
    "simsiam": {"hidden_layers": 2, "hidden_dim": 2048, "output_dim": 2048, "output_bn": "none"},
    # SimCLR v2: 3 layers, BN everywhere; the output BN only centres (no scale).
    "simclr": {"hidden_layers": 2, "hidden_dim": 2048, "output_dim": 128, "output_bn": "center"},
    # Barlow Twins: 3 layers of 8192, the output layer without BN (the loss standardises).
    "barlow": {"hidden_layers": 2, "hidden_dim": 8192, "output_dim": 8192, "output_bn": None},
    # VICReg: 3 layers of 8192, the output layer without BN.
    "vicreg": {"hidden_layers": 2, "hidden_dim": 8192, "output_dim": 8192, "output_bn": None},
}
PROJECTOR_WIDTHS = ("scaled", "paper")
# The papers sized their heads for ResNet-50's 2048-d representation.
_PAPER_INPUT_DIM = 2048
# Scaled widths stay at least this wide (or the paper's width, when narrower).
_MIN_SCALED_WIDTH = 256


def projector_widths(
    input_dim: int, algorithm: str = "simsiam", projector_width: str = "scaled"
) -> tuple[int, int]:
    """Returns the default `(hidden_dim, output_dim)` of an algorithm's projector.

    `"paper"` gives the paper's widths, chosen for a 2048-d ResNet-50.
    `"scaled"` keeps the paper's ratio of each width to the representation:
    `width * input_dim / 2048`, but at least `min(width, 256)`. On a 2048-d
    backbone both are the paper's.

    Parameters of the default heads (projector, plus SimSiam's predictor):

    | algorithm | 512-d (ResNet-18), scaled | 512-d, paper | 2048-d (ResNet-50) |
    |-----------|---------------------------|--------------|--------------------|
    | simsiam   | 512-512: 0.79 M + 0.13 M | 2048-2048: 9.46 M + 2.10 M | 12.60 M + 2.10 M |
    | simclr    | 512-128: 0.59 M | 2048-128: 5.52 M | 8.67 M |
    | barlow    | 2048-2048: 9.46 M | 8192-8192: 138.49 M | 151.07 M |
    | vicreg    | as barlow | as barlow | as barlow |

    (hidden-output widths, three layers each). tensorflow-similarity 0.17 used
    512-512 (0.53 M) for every algorithm, and a 0.53 M predictor.

    Args:
        input_dim: Width of the backbone's representation.
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`.
        projector_width: `"scaled"` (default) or `"paper"`.

    Returns:
        `(hidden_dim, output_dim)`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, or a
            non-positive `input_dim`.
    """
    algorithm = _check_algorithm(algorithm)
    check_choice("projector_width", projector_width, PROJECTOR_WIDTHS)
    _check_positive(input_dim=input_dim)
    spec = _PROJECTORS[algorithm]
    if projector_width == "paper":
        return spec["hidden_dim"], spec["output_dim"]

    def scaled(width: int) -> int:
        return max(min(width, _MIN_SCALED_WIDTH), round(width * input_dim / _PAPER_INPUT_DIM))

    return scaled(spec["hidden_dim"]), scaled(spec["output_dim"])


def build_projector(
    input_dim: int,
    algorithm: str = "simsiam",
    hidden_layers: int | None = None,
    hidden_dim: int | None = None,
    output_dim: int | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "projector",
    *,
    projector_width: str = "scaled",
    activation: Any = "relu",
) -> keras.Model:
    """Builds the projector MLP of an algorithm: (Dense without bias, BN, ReLU) x n, then out.

    Args:
        input_dim: Width of the backbone's representation.
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`; picks the
            paper's depth, widths and output batch norm. Defaults to `"simsiam"`.
        hidden_layers: Number of hidden layers; `None` keeps the paper's (2).
        hidden_dim: Hidden width; `None`: see `projector_width`.
        output_dim: Output width; `None`: see `projector_width`.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name. Defaults to `"projector"`.
        projector_width: The widths left `None`: `"scaled"` (default), the
            paper's in proportion to `input_dim`, or `"paper"`, the paper's
            (for a 2048-d ResNet-50); see `projector_widths`. Keyword-only.
        activation: Activation of the hidden layers. Defaults to `"relu"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, output_dim]`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, or a
            non-positive width.
    """
    algorithm = _check_algorithm(algorithm)
    default_hidden, default_output = projector_widths(input_dim, algorithm, projector_width)
    spec = dict(_PROJECTORS[algorithm], hidden_dim=default_hidden, output_dim=default_output)
    for key, value in (
        ("hidden_layers", hidden_layers),
        ("hidden_dim", hidden_dim),
        ("output_dim", output_dim),
    ):
        if value is not None:
            spec[key] = value
    _check_positive(
        input_dim=input_dim, hidden_dim=spec["hidden_dim"], output_dim=spec["output_dim"]
    )
    plugin = resolve_sync_bn(sync_bn)
    inputs = keras.Input((input_dim,), name=f"{name}_input")
    x = inputs
    for i in range(spec["hidden_layers"]):
        x = keras.layers.Dense(spec["hidden_dim"], use_bias=False, name=f"{name}_dense{i}")(x)
        x = batch_norm_layer(plugin, name=f"{name}_bn{i}")(x)
        x = _activation(activation, f"{name}_relu{i}")(x)
    output_bn = spec["output_bn"]
    x = keras.layers.Dense(
        spec["output_dim"], use_bias=output_bn is None, name=f"{name}_dense_out"
    )(x)
    if output_bn is not None:
        x = batch_norm_layer(
            plugin, center=output_bn == "center", scale=False, name=f"{name}_bn_out"
        )(x)
    return keras.Model(inputs, x, name=name)


def build_predictor(
    input_dim: int,
    hidden_dim: int = 512,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "predictor",
    *,
    activation: Any = "relu",
) -> keras.Model:
    """Builds SimSiam's predictor: Dense without bias, BN, ReLU, then Dense back to `input_dim`.

    Args:
        input_dim: Projection width (also the output width).
        hidden_dim: Bottleneck width (the paper uses a quarter of `input_dim`).
            Defaults to 512.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name. Defaults to `"predictor"`.
        activation: Activation of the hidden layer. Defaults to `"relu"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, input_dim]`.

    Raises:
        ValueError: For a non-positive width.
    """
    _check_positive(input_dim=input_dim, hidden_dim=hidden_dim)
    plugin = resolve_sync_bn(sync_bn)
    inputs = keras.Input((input_dim,), name=f"{name}_input")
    x = keras.layers.Dense(hidden_dim, use_bias=False, name=f"{name}_dense0")(inputs)
    x = batch_norm_layer(plugin, name=f"{name}_bn0")(x)
    x = _activation(activation, f"{name}_relu0")(x)
    x = keras.layers.Dense(input_dim, name=f"{name}_dense_out")(x)
    return keras.Model(inputs, x, name=name)


def get_projector(
    input_dim: int, dim: int = 512, activation: Any = "relu", num_layers: int = 3
) -> keras.Model:
    """tensorflow-similarity 0.17's projector: `num_layers` Dense layers of `dim`, SimSiam-style.

    `build_projector(input_dim, "simsiam", num_layers - 1, dim, dim)`: each
    hidden layer is Dense without bias, batch norm and `activation`; the
    output Dense is followed by a batch norm without affine. 0.17 ended it
    with an `ActivationStdLoggingLayer`; `ContrastiveModel` reports that
    `proj_std` itself.

    Args:
        input_dim: Width of the backbone's representation.
        dim: Width of every layer. Defaults to `512`.
        activation: Hidden activation. Defaults to `"relu"`.
        num_layers: Number of Dense layers, at least 1. Defaults to `3`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, dim]`.

    Raises:
        ValueError: For a non-positive width or `num_layers`.
    """
    check_int("num_layers", num_layers, minimum=1)
    return build_projector(input_dim, "simsiam", num_layers - 1, dim, dim, activation=activation)


def get_predictor(input_dim: int, hidden_dim: int = 512, activation: Any = "relu") -> keras.Model:
    """tensorflow-similarity 0.17's predictor: `build_predictor` with 0.17's arguments.

    Args:
        input_dim: Projection width (also the output width).
        hidden_dim: Bottleneck width. Defaults to `512`.
        activation: Hidden activation. Defaults to `"relu"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, input_dim]`.

    Raises:
        ValueError: For a non-positive width.
    """
    return build_predictor(input_dim, hidden_dim, activation=activation)


def _activation(activation: Any, name: str) -> keras.layers.Layer:
    if isinstance(activation, str) and activation == "relu":
        return keras.layers.ReLU(name=name)
    return keras.layers.Activation(activation)


def _check_algorithm(algorithm: str) -> str:
    if not isinstance(algorithm, str) or algorithm.lower() not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}. Use one of {', '.join(ALGORITHMS)}.")
    return algorithm.lower()


def _check_positive(**widths: int) -> None:
    for key, value in widths.items():
        check_int(key, value, minimum=1)
