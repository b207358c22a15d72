"""`IndexMixin`: the index API a Keras model gains, delegated to its `Indexer`.

The class is defined here with what ties the index to the model (its
hooks, creating the index, compiling and saving with it); its verbs are
functions of the modules beside this one, bound as its methods:
`adding.py` (index, upsert, remove, compact, reset), `lookups.py`
(look up, size, summary), `evaluation.py` (evaluate, calibrate, match),
`saving.py` (save and load the index, export for serving) and
`freshness.py` (whether the index's embeddings are the model's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.models.index import adding, evaluation, freshness, lookups, saving
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store

__all__ = ["IndexMixin"]


class IndexMixin:
    """0.17's index API for a Keras model whose predictions are embeddings.

    The model embeds (with `predict`, so under the strategy the model was
    built in, on all its replicas) and its `Indexer` searches on the host:
    every verb checks its arguments before anything is predicted or
    changed (a bad call leaves the index as it was), embeds, and hands the
    embeddings to the `Indexer`. A model gets its index from `compile` or
    `create_index`; one used before either gets the default index (cosine
    distance, exact linear search, memory store). A model that `compile`
    could not give an index yet (a subclassed model not built then) gets
    the one `compile` was asked for when first used. The model's `compile`
    calls `_compile_index`, and its compile config holds the index
    settings, so `keras.saving.load_model` recreates the index. `save`
    writes the model and, beside it, its index; `export_serving` writes
    both as one SavedModel that serves with TensorFlow alone.

    The verbs: `index`, `index_single`, `upsert_index`,
    `remove_from_index`, `compact_index`, `reset_index` (`adding.py`);
    `lookup`, `single_lookup`, `index_size`, `index_summary`,
    `to_data_frame` (`lookups.py`); `evaluate_retrieval`, `calibrate`,
    `match`, `evaluate_classification` (`evaluation.py`); `save_index`,
    `load_index`, `export_serving` (`saving.py`).

    The index knows which weights made its embeddings: `index` records the
    fingerprint of the embedding network's weights (their SHA-256, see
    `fingerprint.py`) in an empty index, and the index saves and loads
    it. When the weights have changed since (trained, set or loaded), the
    index is stale: its embeddings are not the model's, so it answers with
    the neighbours of the old model. Then:

    - `lookup`, `single_lookup`, `evaluate_retrieval`, `calibrate`,
      `match` and `evaluate_classification` warn (`StaleIndexWarning`),
      once per change of the weights, and go on;
    - `index` and `index_single` refuse (`StaleIndexError`) to add
      embeddings of the new weights to it, which would mix two models'
      embeddings in one index;
    - `export_serving` refuses (`StaleIndexError`) unless
      `allow_stale_index=True`.

    The fix is to embed everything again: `reset_index()`, then
    `index(x, y)`. A model saved and loaded with its index has the same
    weights, so its index is not stale. An index without a fingerprint
    (saved before fingerprints were recorded, or filled through the
    `Indexer` directly) is of unknown freshness: `load_index` warns once
    that it cannot be checked, and nothing is compared; `reset_index` then
    `index` records one. Lookups reuse the fingerprint while a cheap digest
    of the weights (`weights_sample_key`: the optimizer's step count and a
    few values of each weight) is unchanged; `index` and `export_serving`
    hash all the weights.

    A class mixing this in provides `_index_embeddings(x)` (the embeddings
    of a batch, as the indexer takes them), `_index_embedding_size(output)`
    and `_index_input_shape()`, and may provide `_index_weights()` (the
    variables that make the embeddings; the model's weights by default).

    Attributes:
        index_batch_size: The batch size of the predictions the index API
            makes (Keras' default of 32 makes many small distributed steps).
            Defaults to 256.
    """

    _ix: Indexer | None = None
    # `create_index` arguments recorded by `compile`, for an index made later.
    _index_settings: dict[str, Any] | None = None
    index_batch_size: int = 256
    # (weights_sample_key, weights_sha256) of the embedding weights when last hashed.
    _fingerprint_cache: tuple[str, str] | None = None
    # The "recorded current" fingerprints last warned about, so a change warns once.
    _stale_warned: str | None = None

    # Hooks, the index itself and creating it.

    def _index_embeddings(self, x: Any) -> Any:
        return self.predict(x, batch_size=self.index_batch_size, verbose=0)

    def _index_embedding_size(self, embedding_output: int | None) -> int:
        raise NotImplementedError

    def _index_input_shape(self) -> tuple[int | None, ...] | None:
        return None

    def _index_weights(self) -> list[Any]:
        return list(self.weights)

    def _serving_embeddings(self, images: tf.Tensor) -> tf.Tensor:
        """The embeddings the index holds of `images`, traceable, in inference mode.

        What `serving.export_model` traces: the model's output (its
        `embedding_output` of several), as `_index_embeddings` predicts it.
        """
        outputs = self(images, training=False)
        if isinstance(outputs, dict):
            outputs = [outputs[name] for name in self.output_names]
        if isinstance(outputs, (list, tuple)):
            settings = self._index_settings or {}
            chosen = self._ix.embedding_output if self._ix else settings.get("embedding_output")
            outputs = outputs[chosen or 0]
        return outputs

    @property
    def _index(self) -> Indexer:
        if self._ix is None:
            self.create_index(**(self._index_settings or {}))
        return self._ix

    @_index.setter
    def _index(self, index: Indexer) -> None:
        self._ix = index

    def create_index(
        self,
        distance: Distance | str = "cosine",
        search: Search | str = "linear",
        kv_store: Store | str = "memory",
        evaluator: Evaluator | str = "memory",
        embedding_output: int | None = None,
        stat_buffer_size: int = 1000,
    ) -> None:
        """Creates the model's (empty) index, replacing any previous one.

        `compile` calls it; call it yourself to change the index without
        recompiling.

        Args:
            distance: A `Distance` or its name. Defaults to `"cosine"`.
            search: `"linear"` or a `Search` instance. Defaults to
                `"linear"`.
            kv_store: `"memory"` or a `Store` instance. Defaults to
                `"memory"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            embedding_output: Which output holds the embeddings, for a
                multi-output model; `None` (default) means output 0.
            stat_buffer_size: Lookup timings kept for `index_summary`.

        Raises:
            ValueError: For an unknown component, or an `embedding_output`
                the model does not have.
        """
        size = self._index_embedding_size(embedding_output)
        self._ix = Indexer(
            embedding_size=size,
            distance=distance,
            search=search,
            kv_store=kv_store,
            evaluator=evaluator,
            embedding_output=embedding_output,
            stat_buffer_size=stat_buffer_size,
        )

    def _compile_index(
        self,
        can_index: bool,
        distance: Distance | str,
        search: Search | str,
        kv_store: Store | str,
        evaluator: Evaluator | str,
        stat_buffer_size: int,
        **settings: Any,
    ) -> None:
        """What `compile` does for the index: `create_index` if `can_index`, settings recorded.

        `can_index` is whether the embedding output is `[batch, dim]`; a
        model whose output is not (or not known yet) still compiles and
        trains, and its index API says why it cannot index, or makes the
        recorded index once it can. `settings` are other `create_index`
        arguments (`embedding_output`); an `evaluator` instance is recorded
        as `"memory"`.
        """
        given = {"search": search, "kv_store": kv_store, "evaluator": evaluator}
        if can_index:
            self.create_index(
                distance=distance, **given, stat_buffer_size=stat_buffer_size, **settings
            )
        else:
            self._ix = None
        self._index_settings = {
            "distance": self._ix.distance if self._ix is not None else distance,
            **given,
            "evaluator": evaluator if isinstance(evaluator, str) else "memory",
            **settings,
            "stat_buffer_size": stat_buffer_size,
        }

    def get_compile_config(self) -> dict[str, Any] | None:
        """Keras' compile config plus the index settings, so loading recreates the index."""
        config = super().get_compile_config()
        if config is not None and self._index_settings is not None:
            config = dict(config)
            config["index"] = {
                key: value
                if isinstance(value, (str, int, type(None)))
                else keras.saving.serialize_keras_object(value)
                for key, value in self._index_settings.items()
            }
        return config

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles from `get_compile_config()`'s output, as `keras.saving.load_model` does."""
        config = keras.saving.deserialize_keras_object(config)
        index_settings = config.pop("index", None) or {}
        self.compile(**config, **index_settings)
        if self.built:
            # As Keras does: the optimizer's variables exist before the weights are loaded.
            self.optimizer.build(self.trainable_variables)

    def save(
        self,
        filepath: str | Path,
        save_index: bool = True,
        compression: bool = True,
        overwrite: bool = True,
        include_optimizer: bool = True,
        save_format: str | None = None,
        signatures: Any = None,
        options: Any = None,
        save_traces: bool = True,
        **kwargs: Any,
    ) -> None:
        """`keras.Model.save`, and the index beside the file (see `index_path`), all or nothing.

        The model file and the index are written to hidden siblings
        (`.model.partial.keras`, `.model.index.partial/`), flushed to disk,
        and switched in by renames, the index first: after a kill or a full
        disk at any moment the model file and its index are the old pair or
        the new one, and `load_index` reads the pair. The index records the
        identity of the model (the SHA-256 of the file and of the weights),
        so an index is refused for another model or file.

        The arguments are 0.17's, in its order. Keras 3 writes `.keras` files
        (configs and weights, optimizer state included); the SavedModel-only
        arguments of 0.17 are accepted at their defaults, and `model.export`
        writes a SavedModel.

        Args:
            filepath: A `.keras` file.
            save_index: Also save the index, if the model has one (from
                `compile` or `create_index`). Defaults to `True`.
            compression: Compress the index's data. Defaults to `True`.
            overwrite: As for `keras.Model.save`. Defaults to `True`.
            include_optimizer: As for `keras.Model.save` (Keras 3 reads it
                for `.h5` files; a `.keras` file always holds the optimizer).
                Defaults to `True`.
            save_format: As for `keras.Model.save` (deprecated in Keras 3).
                Defaults to `None`.
            signatures: SavedModel only: must be `None` (see `model.export`).
            options: SavedModel only: must be `None` (see `model.export`).
            save_traces: Accepted for 0.17's signature: a `.keras` file holds
                configs, never traced functions. Defaults to `True`.
            **kwargs: Other `keras.Model.save` arguments (`zipped`).

        Raises:
            ValueError: If `signatures` or `options` is given (before anything
                is written), or what `keras.Model.save` raises.
            OSError: If a file cannot be written (a full disk, say): it names
                the file (and the space left), and the previous save is kept.
        """
        del save_traces
        for name, value in (("signatures", signatures), ("options", options)):
            if value is not None:
                raise ValueError(
                    f"{type(self).__name__}.save: {name}= configures a TensorFlow SavedModel, "
                    "which Keras 3's save does not write. Save a .keras file without it, "
                    "or write a SavedModel with model.export(path)."
                )
        if save_format is not None:
            kwargs["save_format"] = save_format
        saving.save_with_index(
            self,
            super().save,
            filepath,
            save_index,
            compression,
            overwrite,
            include_optimizer,
            **kwargs,
        )

    # The verbs, defined beside this module.

    index = adding.index
    index_single = adding.index_single
    upsert_index = adding.upsert_index
    remove_from_index = adding.remove_from_index
    compact_index = adding.compact_index
    reset_index = adding.reset_index
    _index_stream = adding._index_stream
    _embedded_batches = adding._embedded_batches

    lookup = lookups.lookup
    single_lookup = lookups.single_lookup
    index_size = lookups.index_size
    index_summary = lookups.index_summary
    to_data_frame = lookups.to_data_frame
    _embed = lookups._embed
    _index_batch = lookups._index_batch
    _check_lookup = lookups._check_lookup

    evaluate_retrieval = evaluation.evaluate_retrieval
    calibrate = evaluation.calibrate
    match = evaluation.match
    evaluate_classification = evaluation.evaluate_classification
    _query_batch = evaluation._query_batch

    save_index = saving.save_index
    load_index = saving.load_index
    export_serving = saving.export_serving
    _weights_sha256 = saving._weights_sha256

    _embedding_fingerprint = freshness._embedding_fingerprint
    _stale_fingerprints = freshness._stale_fingerprints
    _stale_message = freshness._stale_message
    _warn_if_stale = freshness._warn_if_stale
    _fingerprint_to_record = freshness._fingerprint_to_record
