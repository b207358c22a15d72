"""The similarity head every architecture shares: pooling, then the embedding layer."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from tensorflow_similarity.layers.gem_pooling import GeneralizedMeanPooling2D
from tensorflow_similarity.layers.metric_embedding import MetricEmbedding
from tensorflow_similarity.models.similarity_model import SimilarityModel


def similarity_model(
    backbone: keras.Model,
    input_shape: Sequence[int | None],
    *,
    embedding_size: int,
    l2_norm: bool,
    include_top: bool,
    pooling: str | None,
    gem_p: float,
    name: str,
) -> SimilarityModel:
    """Wraps a backbone with the shared pooling and embedding head.

    Args:
        backbone: A model mapping images to a 4-D feature map.
        input_shape: The image shape of the new model's input.
        embedding_size: Output size of the embedding layer.
        l2_norm: `MetricEmbedding` (unit-length outputs) if `True`, else a
            plain `Dense`.
        include_top: Whether to add the embedding layer.
        pooling: `"gem"`, `"avg"`, `"max"` or `None`.
        gem_p: The GeM power.
        name: The model's name.

    Returns:
        A `SimilarityModel` (Functional): `Input -> backbone -> pooling ->
        embedding`.

    Raises:
        ValueError: If the backbone's output is not a 4-D feature map while a
            pooling is requested.
    """
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = backbone(inputs)
    if pooling is not None and len(x.shape) != 4:
        raise ValueError(
            f"pooling={pooling!r} needs a backbone whose output is a 4-D feature map; "
            f"{backbone.name!r} outputs shape {x.shape}. Use a backbone without its own "
            "pooling or classifier, or pooling=None with include_top=False."
        )
    if pooling == "gem":
        x = GeneralizedMeanPooling2D(p=gem_p, name="gem_pool")(x)
    elif pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="max_pool")(x)
    if include_top:
        if l2_norm:
            x = MetricEmbedding(embedding_size, name="metric_embedding")(x)
        else:
            x = keras.layers.Dense(embedding_size, name="embedding")(x)
    return SimilarityModel(inputs, x, name=name)
