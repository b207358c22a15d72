"""Projector and predictor heads of the self-supervised papers, and the model factory."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity._validation import check_int
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


def build_projector(
    input_dim: int,
    algorithm: str = "simsiam",
    hidden_layers: int | None = None,
    hidden_dim: int | None = None,
    output_dim: int | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "projector",
) -> keras.Model:
    """Builds the projector MLP of an algorithm: (Dense without bias, BN, ReLU) x n, then out.

    Args:
        input_dim: Width of the backbone's representation.
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`; picks the
            paper's depth, widths and output batch norm. Defaults to `"simsiam"`.
        hidden_layers: Number of hidden layers; `None` keeps the paper's (2).
        hidden_dim: Hidden width; `None` keeps the paper's.
        output_dim: Output width; `None` keeps the paper's.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name. Defaults to `"projector"`.

    Returns:
        A Functional model `[batch, input_dim] -> [batch, output_dim]`.

    Raises:
        ValueError: For an unknown algorithm or a non-positive width.
    """
    algorithm = _check_algorithm(algorithm)
    spec = dict(_PROJECTORS[algorithm])
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
        x = keras.layers.ReLU(name=f"{name}_relu{i}")(x)
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
) -> keras.Model:
    """Builds SimSiam's predictor: Dense without bias, BN, ReLU, then Dense back to `input_dim`.

    Args:
        input_dim: Projection width (also the output width).
        hidden_dim: Bottleneck width (the paper uses a quarter of `input_dim`).
            Defaults to 512.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        name: Model name. Defaults to `"predictor"`.

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
    x = keras.layers.ReLU(name=f"{name}_relu0")(x)
    x = keras.layers.Dense(input_dim, name=f"{name}_dense_out")(x)
    return keras.Model(inputs, x, name=name)


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
) -> ContrastiveModel:
    """Builds a `ContrastiveModel` with the paper's projector (and predictor) for `algorithm`.

    With `sync_bn`, the batch norms of the backbone, the projector and the
    predictor are all synchronised.

    Args:
        backbone: Keras model with a 2-D output `[batch, features]` (use a
            builder's `include_top=False` with a pooling).
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`.
        projector_hidden_dim: Projector hidden width; `None` keeps the paper's.
        projector_output_dim: Projector output width; `None` keeps the paper's.
        projector_hidden_layers: Projector hidden layers; `None` keeps 2.
        predictor_hidden_dim: SimSiam predictor bottleneck; `None` uses a quarter
            of the projector output width.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        augmenter: Optional callable `images -> (view1, view2)`.
        concat_views: See `ContrastiveModel`. Defaults to `None`.
        name: Model name.

    Returns:
        An uncompiled `ContrastiveModel`.

    Raises:
        ValueError: For an unknown algorithm or a backbone whose output is not 2-D.

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
    resolve_sync_bn(sync_bn)  # A bad value fails here, before anything is built.
    projector = build_projector(
        output_shape[-1],
        algorithm,
        hidden_layers=projector_hidden_layers,
        hidden_dim=projector_hidden_dim,
        output_dim=projector_output_dim,
        sync_bn=sync_bn,
    )
    predictor = None
    if algorithm == "simsiam":
        out_dim = projector.output.shape[-1]
        predictor = build_predictor(
            out_dim,
            hidden_dim=predictor_hidden_dim or max(out_dim // 4, 1),
            sync_bn=sync_bn,
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
