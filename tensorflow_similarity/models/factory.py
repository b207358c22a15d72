"""`create_contrastive_model`: a backbone, its algorithm's heads, one `ContrastiveModel`."""

from __future__ import annotations

import logging
from typing import Any

import keras

from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms import algorithm_names, get_algorithm
from tensorflow_similarity.models.contrastive import ContrastiveModel
from tensorflow_similarity.models.contrastive_arguments import resolve_batch_norm

__all__ = ["create_contrastive_model"]

_logger = logging.getLogger(__name__)


def create_contrastive_model(
    backbone: keras.Model,
    algorithm: str = "simsiam",
    projector_hidden_dim: int | None = None,
    projector_output_dim: int | None = None,
    projector_hidden_layers: int | None = None,
    predictor_hidden_dim: int | None = None,
    sync_bn: bool | SyncBatchNormPlugin | None = None,
    augmenter: Any = None,
    concat_views: bool | None = None,
    name: str = "contrastive_model",
    *,
    projector: keras.Model | None = None,
    predictor: keras.Model | None = None,
    projector_width: str = "scaled",
    accumulation_steps: int = 1,
    chunk_size: int | None = None,
    momentum: float | None = None,
    total_steps: int | None = None,
    algorithm_options: dict[str, Any] | None = None,
    bn: str | None = None,
    shuffle_seed: int = 0,
) -> ContrastiveModel:
    """Builds a `ContrastiveModel` with the paper's projector (and predictor) for `algorithm`.

    The heads are the paper's, with widths in proportion to the backbone's
    (`projector_width="scaled"`, see `projector_widths` for the parameter
    counts) or the paper's own (`"paper"`); the chosen widths and parameter
    count are logged at INFO level. Heads built elsewhere are passed as
    `projector=` (and `predictor=`), as in tensorflow-similarity 0.17. With
    `bn="sync"` (or `sync_bn=True`), the batch norms of the backbone, the
    projector and the predictor are all synchronised; with `bn="shuffle"`
    (BYOL, MoCo v3) each replica normalises its own share and the key
    encoder runs on the global batch permuted across replicas (see
    `ContrastiveModel`).

    Args:
        backbone: Keras model with a 2-D output `[batch, features]` (use a
            builder's `include_top=False` with a pooling).
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"`, `"vicreg"`, `"byol"`,
            `"mocov3"`, `"dino"`, `"mocov2"`, `"swav"` or another registered
            algorithm's name (see `models.algorithms`).
        projector_hidden_dim: Projector hidden width; `None`: see
            `projector_width`.
        projector_output_dim: Projector output width; `None`: see
            `projector_width`.
        projector_hidden_layers: Projector hidden layers; `None` keeps the
            paper's (2).
        predictor_hidden_dim: The predictor's hidden width; `None` uses the
            paper's ratio to the projector output width (SimSiam a quarter,
            BYOL and MoCo v3 16 times).
        sync_bn: `None`, `False`, `True` or a `SyncBatchNormPlugin`; `True`
            (or a plugin) is `bn="sync"`, `False` is `bn="per_replica"` or
            `"shuffle"`. Defaults to `None`: as `bn` says, else `False`.
        augmenter: Optional callable `images -> (view1, view2)`.
        concat_views: See `ContrastiveModel`. Defaults to `None`.
        name: Model name.
        projector: A projector model to use instead of building one
            (keyword-only, as the two below); then the `projector_*`
            arguments must be left `None`.
        predictor: A predictor model, for an algorithm with one (SimSiam);
            `None` builds one on the projector's output width.
        projector_width: `"scaled"` (default) or `"paper"`; see
            `projector_widths`.
        accumulation_steps: Batches per optimizer step; see
            `ContrastiveModel`. Defaults to 1.
        chunk_size: Samples per chunk for cached embeddings (exact batches
            larger than memory); see `ContrastiveModel`. Defaults to `None`.
        momentum: A teacher method's base momentum; `None` for the paper's.
        total_steps: The run's optimizer steps for the momentum schedule;
            `None` takes them from `fit`.
        algorithm_options: The method's own options (DINO's); see
            `ContrastiveModel`.
        bn: `"per_replica"`, `"sync"` or `"shuffle"`; see `ContrastiveModel`.
            Defaults to `None`: as `sync_bn` says, else `"per_replica"`.
        shuffle_seed: With `bn="shuffle"`, the seed of the key encoder's
            permutations. Defaults to 0.

    Returns:
        An uncompiled `ContrastiveModel`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, a backbone
            whose output is not 2-D, `projector` together with
            `projector_*` widths, or a `predictor` for an algorithm
            without one, an unknown `bn`, a `bn` that contradicts `sync_bn`,
            or `bn="shuffle"` for a method without a key encoder (all
            before anything is built).
        TypeError: If a head is not a Keras model.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.models import create_contrastive_model
    >>> images = keras.Input((8, 8, 3))
    >>> x = keras.layers.BatchNormalization()(keras.layers.Conv2D(16, 3)(images))
    >>> features = keras.layers.GlobalAveragePooling2D()(x)
    >>> model = create_contrastive_model(keras.Model(images, features), "barlow",
    ...                                  projector_output_dim=64, sync_bn=True)
    >>> model.projector.output.shape
    (None, 64)
    """
    method = get_algorithm(algorithm)
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
    if predictor is not None and not method.has_predictor:
        raise ValueError(_unused_predictor(method.name))
    for head_name, head in (("projector", projector), ("predictor", predictor)):
        if head is not None and not isinstance(head, keras.Model):
            raise TypeError(f"{head_name} must be a keras.Model, got {type(head).__name__}.")
    # A bad or contradictory value fails here, before anything is built.
    bn, plugin = resolve_batch_norm(bn, sync_bn, method)
    sync_bn = plugin if plugin is not None else False
    if projector is None:
        projector = method.build_projector(
            output_shape[-1],
            hidden_layers=projector_hidden_layers,
            hidden_dim=projector_hidden_dim,
            output_dim=projector_output_dim,
            sync_bn=sync_bn,
            projector_width=projector_width,
        )
    if predictor is None:
        predictor = method.build_predictor(
            projector.output.shape[-1], hidden_dim=predictor_hidden_dim, sync_bn=sync_bn
        )
    _logger.info(
        "create_contrastive_model(%s): projector %s (%d parameters)%s",
        method.name,
        "-".join(str(layer.units) for layer in projector.layers if hasattr(layer, "units")),
        projector.count_params(),
        f", predictor {predictor.count_params()} parameters" if predictor is not None else "",
    )
    return ContrastiveModel(
        backbone,
        projector,
        predictor,
        algorithm=method.name,
        sync_bn=sync_bn,
        augmenter=augmenter,
        concat_views=concat_views,
        name=name,
        accumulation_steps=accumulation_steps,
        chunk_size=chunk_size,
        momentum=momentum,
        total_steps=total_steps,
        algorithm_options=algorithm_options,
        bn=bn,
        shuffle_seed=shuffle_seed,
    )


def _unused_predictor(algorithm: str) -> str:
    with_one = [get_algorithm(name) for name in algorithm_names()]
    with_one = [method for method in with_one if method.has_predictor]
    names = [method.display_name for method in with_one]
    titles = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    titles = titles or "no algorithm"
    return (
        f"create_contrastive_model: only {titles} {'has' if len(with_one) < 2 else 'have'} a "
        f"predictor; algorithm={algorithm!r} would not use the one passed. Drop predictor=..."
        + (f", or use algorithm={with_one[0].name!r}." if with_one else ".")
    )
