"""The projector and predictor heads of the self-supervised papers, by algorithm name.

Each algorithm's paper heads are declared in its module under
`models.algorithms`; the MLP building blocks are in `models.mlp_heads`.
"""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms import algorithm_names, get_algorithm
from tensorflow_similarity.models.mlp_heads import PROJECTOR_WIDTHS, build_predictor

__all__ = [
    "ALGORITHMS",
    "PROJECTOR_WIDTHS",
    "build_predictor",
    "build_projector",
    "get_predictor",
    "get_projector",
    "projector_widths",
]

# The built-in algorithms' names (`algorithm_names()` also lists those registered later).
ALGORITHMS = algorithm_names()


def projector_widths(
    input_dim: int, algorithm: str = "simsiam", projector_width: str = "scaled"
) -> tuple[int, int]:
    """Returns the default `(hidden_dim, output_dim)` of an algorithm's projector.

    `"paper"` gives the paper's widths, chosen for a 2048-d ResNet-50.
    `"scaled"` keeps the paper's ratio of each width to the representation:
    `width * input_dim / 2048`, but at least `min(width, 256)`. On a 2048-d
    backbone both are the paper's.

    Parameters of the default heads (projector, plus the predictor of SimSiam,
    BYOL and MoCo v3):

    | algorithm | 512-d (ResNet-18), scaled | 512-d, paper | 2048-d (ResNet-50) |
    |-----------|---------------------------|--------------|--------------------|
    | simsiam   | 512-512: 0.79 M + 0.13 M | 2048-2048: 9.46 M + 2.10 M | 12.60 M + 2.10 M |
    | simclr    | 512-128: 0.59 M | 2048-128: 5.52 M | 8.67 M |
    | barlow    | 2048-2048: 9.46 M | 8192-8192: 138.49 M | 151.07 M |
    | vicreg    | as barlow | as barlow | as barlow |
    | byol      | 1024-256: 0.79 M + 2.11 M | 4096-256: 3.16 M + 2.11 M | 9.45 M + 2.11 M |
    | mocov3    | 1024-256: 1.84 M + 2.11 M | 4096-256: 19.96 M + 2.11 M | 26.25 M + 2.11 M |
    | dino      | 512-16384: 4.85 M | 2048-65536: 22.55 M | 25.69 M |
    | mocov2    | 512-128: 0.33 M | 2048-128: 1.31 M | 4.46 M |
    | swav      | 512-750: 0.43 M | 2048-3000: 1.70 M | 4.85 M |

    (hidden-output widths; three layers each, BYOL's, MoCo v2's and SwAV's
    two; DINO's and SwAV's outputs are their prototypes, after a 256-d and a
    128-d bottleneck). A method with a momentum teacher holds a second
    projector. tensorflow-similarity 0.17 used 512-512
    (0.53 M) for every algorithm, and a 0.53 M predictor.

    Args:
        input_dim: Width of the backbone's representation.
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"`, `"vicreg"`, `"byol"`,
            `"mocov3"`, `"dino"`, `"mocov2"`, `"swav"` or another registered
            algorithm's name (see `models.algorithms`).
        projector_width: `"scaled"` (default) or `"paper"`.

    Returns:
        `(hidden_dim, output_dim)`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, or a
            non-positive `input_dim`.
    """
    return get_algorithm(algorithm).projector_widths(input_dim, projector_width)


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
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"`, `"vicreg"`, `"byol"`,
            `"mocov3"`, `"dino"`, `"mocov2"`, `"swav"` or another registered
            algorithm's name; picks the paper's depth, widths and output
            batch norm. Defaults to `"simsiam"`.
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
    return get_algorithm(algorithm).build_projector(
        input_dim,
        hidden_layers,
        hidden_dim,
        output_dim,
        sync_bn,
        name,
        projector_width=projector_width,
        activation=activation,
    )


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
