"""Projector and predictor heads of the self-supervised papers, and the model factory."""

from __future__ import annotations

import logging
from typing import Any

import keras

from tensorflow_similarity._validation import check_choice, check_int
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)
from tensorflow_similarity.models.contrastive_model import ALGORITHMS, ContrastiveModel

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

_logger = logging.getLogger(__name__)


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


def create_contrastive_model(
    backbone: keras.Model,
    algorithm: str = "simsiam",
    projector_hidden_dim: int | None = None,
    projector_output_dim: int | None = None,
    projector_hidden_layers: int | None = None,
    predictor_hidden_dim: int | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    augmenter: Any = None,
    concat_views: bool | None = None,
    name: str = "contrastive_model",
    *,
    projector: keras.Model | None = None,
    predictor: keras.Model | None = None,
    projector_width: str = "scaled",
) -> ContrastiveModel:
    """Builds a `ContrastiveModel` with the paper's projector (and predictor) for `algorithm`.

    The heads are the paper's, with widths in proportion to the backbone's
    (`projector_width="scaled"`, see `projector_widths` for the parameter
    counts) or the paper's own (`"paper"`); the chosen widths and parameter
    count are logged at INFO level. Heads built elsewhere are passed as
    `projector=` (and `predictor=`), as in tensorflow-similarity 0.17. With
    `sync_bn`, the batch norms of the backbone, the projector and the
    predictor are all synchronised.

    Args:
        backbone: Keras model with a 2-D output `[batch, features]` (use a
            builder's `include_top=False` with a pooling).
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`.
        projector_hidden_dim: Projector hidden width; `None`: see
            `projector_width`.
        projector_output_dim: Projector output width; `None`: see
            `projector_width`.
        projector_hidden_layers: Projector hidden layers; `None` keeps 2.
        predictor_hidden_dim: SimSiam predictor bottleneck; `None` uses a quarter
            of the projector output width.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        augmenter: Optional callable `images -> (view1, view2)`.
        concat_views: See `ContrastiveModel`. Defaults to `None`.
        name: Model name.
        projector: A projector model to use instead of building one
            (keyword-only, as the two below); then the `projector_*`
            arguments must be left `None`.
        predictor: A predictor model (SimSiam only); `None` builds one on the
            projector's output width.
        projector_width: `"scaled"` (default) or `"paper"`; see
            `projector_widths`.

    Returns:
        An uncompiled `ContrastiveModel`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, a backbone
            whose output is not 2-D, `projector` together with
            `projector_*` widths, or a `predictor` for an algorithm other
            than SimSiam.
        TypeError: If a head is not a Keras model.

    Example:

    >>> model = create_contrastive_model(ResNet18Sim((32, 32, 3), include_top=False),
    ...                                  "barlow", projector_output_dim=512, sync_bn=True)
    """
    algorithm = _check_algorithm(algorithm)
    if not isinstance(backbone, keras.Model):
        raise TypeError(f"backbone must be a keras.Model, got {type(backbone).__name__}.")
    output_shape = backbone.output.shape if hasattr(backbone, "output") else None
    if output_shape is None or len(output_shape) != 2 or output_shape[-1] is None:
        raise ValueError(
            "The backbone must output [batch, features]; got output shape "
            f"{output_shape}. Build it with a pooling (e.g. include_top=False, pooling='avg')."
        )
    widths = {
        "projector_hidden_dim": projector_hidden_dim,
        "projector_output_dim": projector_output_dim,
        "projector_hidden_layers": projector_hidden_layers,
    }
    given = [key for key, value in widths.items() if value is not None]
    if projector is not None and given:
        raise ValueError(
            f"create_contrastive_model: {', '.join(given)} size a projector to build, but a "
            "projector model was passed. Give either projector=... or the widths."
        )
    if predictor is not None and algorithm != "simsiam":
        raise ValueError(
            f"create_contrastive_model: only SimSiam has a predictor; algorithm={algorithm!r} "
            "would not use the one passed. Drop predictor=..., or use algorithm='simsiam'."
        )
    for head_name, head in (("projector", projector), ("predictor", predictor)):
        if head is not None and not isinstance(head, keras.Model):
            raise TypeError(f"{head_name} must be a keras.Model, got {type(head).__name__}.")
    resolve_sync_bn(sync_bn)  # A bad value fails here, before anything is built.
    if projector is None:
        projector = build_projector(
            output_shape[-1],
            algorithm,
            hidden_layers=projector_hidden_layers,
            hidden_dim=projector_hidden_dim,
            output_dim=projector_output_dim,
            sync_bn=sync_bn,
            projector_width=projector_width,
        )
    if algorithm == "simsiam" and predictor is None:
        out_dim = projector.output.shape[-1]
        predictor = build_predictor(
            out_dim,
            hidden_dim=predictor_hidden_dim or max(out_dim // 4, 1),
            sync_bn=sync_bn,
        )
    _logger.info(
        "create_contrastive_model(%s): projector %s (%d parameters)%s",
        algorithm,
        "-".join(str(layer.units) for layer in projector.layers if hasattr(layer, "units")),
        projector.count_params(),
        f", predictor {predictor.count_params()} parameters" if predictor is not None else "",
    )
    return ContrastiveModel(
        backbone,
        projector,
        predictor,
        algorithm=algorithm,
        sync_bn=sync_bn,
        augmenter=augmenter,
        concat_views=concat_views,
        name=name,
    )


def _check_algorithm(algorithm: str) -> str:
    if not isinstance(algorithm, str) or algorithm.lower() not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}. Use one of {', '.join(ALGORITHMS)}.")
    return algorithm.lower()


def _check_positive(**widths: int) -> None:
    for key, value in widths.items():
        check_int(key, value, minimum=1)
