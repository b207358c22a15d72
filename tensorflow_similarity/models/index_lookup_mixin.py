"""The index a model keeps: create it, index examples, look them up, save and load it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer import Indexer, persistence
from tensorflow_similarity.indexer.streaming import is_stream, stream_elements, unpack_element
from tensorflow_similarity.models.index_arguments import (
    canonical_distance,
    check_length,
    keras_rank_adjusted,
)
from tensorflow_similarity.models.index_files import (
    index_of_model_file,
    index_path,
    is_model_file,
    recover_pair,
)
from tensorflow_similarity.models.index_fingerprint import (
    StaleIndexError,
    StaleIndexWarning,
    weights_sample_key,
    weights_sha256,
)
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store
from tensorflow_similarity.types import Lookup

__all__ = [
    "IndexLookupMixin",
    "canonical_distance",
    "check_length",
    "index_path",
    "keras_rank_adjusted",
    "recover_pair",
]


class IndexLookupMixin:
    """The indexing part of `IndexMixin`: the index, adding, looking up, persistence.

    See `IndexMixin`, the class models mix in. The model embeds (with
    `predict`, so under the strategy the model was built in, on all its
    replicas) and its `Indexer` searches on the host.
    Arguments are checked before anything is predicted or changed: a bad
    call leaves the index as it was. A model gets its index from `compile`
    or `create_index`; one used before either gets the default index
    (cosine distance, exact linear search, memory store). A model that
    `compile` could not give an index yet (a subclassed model not built
    then) gets the one `compile` was asked for when first used.

    The index knows which weights made its embeddings: `index` records the
    fingerprint of the embedding network's weights (their SHA-256, see
    `index_fingerprint`) in an empty index, and the index saves and loads
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

    # Hooks.

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

    # The index itself.

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

    # Indexing.

    def index(
        self,
        x: Any,
        y: Any = None,
        data: Any = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Embeds `x` and adds the embeddings, with `y` and `data`, to the index.

        `x` may also be a stream of batches: a `tf.data.Dataset` or any
        iterator whose elements are, as for Keras' `fit`, `x`, `(x,)`,
        `(x, y)` or `(x, y, data)`. Each batch is embedded, added and
        dropped before the next is read, so the examples and their
        embeddings are never all in memory; the add is all or nothing, as
        `Indexer.batch_add` of a stream (which documents what a failed add
        leaves).

        Args:
            x: A batch of examples, or a stream of batches.
            y: Their integer classes, or `None` (`None` for a stream).
            data: Items kept with them (returned by lookups), or `None`
                (`None` for a stream).
            build: Kept for 0.17's signature.
            verbose: Print progress if 1. Defaults to 1.

        Raises:
            ValueError: If `x` does not fit the model's input, or `y` or
                `data` does not have one item per example; for a stream, as
                `Indexer.batch_add`, and if a batch does not fit the
                model's input (its number, from 0, is named).
            StaleIndexError: If the index holds embeddings that other
                weights made (the model trained since it indexed them):
                `reset_index()`, then index all examples again.

        Example:

        >>> import keras, numpy as np, tensorflow as tf
        >>> from tensorflow_similarity.models import SimilarityModel
        >>> inputs = keras.Input((3,))
        >>> model = SimilarityModel(inputs, keras.layers.Dense(2)(inputs))
        >>> model.compile("sgd", "mse", distance="l2")
        >>> rows = np.arange(12, dtype="float32").reshape(4, 3)
        >>> dataset = tf.data.Dataset.from_tensor_slices((rows, [0, 1, 0, 1])).batch(2)
        >>> model.index(dataset, verbose=0)
        >>> model.index_size()
        4
        """
        if is_stream(x):
            self._index_stream(x, y, data, build, verbose)
            return
        x = self._index_batch(x)
        check_length("y", y, len(x))
        check_length("data", data, len(x))
        fingerprint = self._fingerprint_to_record()
        if verbose:
            print(f"[Indexing {len(x)} examples]")
        self._index.batch_add(self._embed(x), labels=y, data=data, build=build, verbose=verbose)
        self._index.embedding_fingerprint = fingerprint

    def _index_stream(self, stream: Any, y: Any, data: Any, build: bool, verbose: int) -> None:
        """`index` of a stream: each batch embedded as the indexer reads it."""
        if y is not None or data is not None:
            raise ValueError(
                "index(x=stream): y= and data= go inside the stream's elements, as (x, y) or "
                "(x, y, data) tuples; got a stream and y or data beside it."
            )
        fingerprint = self._fingerprint_to_record()
        size = self._index.size()
        if verbose:
            print("[Indexing a stream of batches]")
        self._index.batch_add(self._embedded_batches(stream), build=build, verbose=verbose)
        self._index.embedding_fingerprint = fingerprint
        if verbose:
            print(f"[Indexed {self._index.size() - size} examples]")

    def _embedded_batches(self, stream: Any) -> Iterator[tuple[Any, Any, Any]]:
        """`(embeddings, y, data)` of each element of `stream`, checked, then embedded."""
        for number, element in enumerate(stream_elements(stream)):
            try:
                x, y, data = unpack_element(element)
                x = self._index_batch(x)
                check_length("y", y, len(x))
                check_length("data", data, len(x))
            except ValueError as error:
                raise ValueError(f"Batch {number} of the stream was refused: {error}") from error
            yield self._embed(x), y, data

    def index_single(
        self,
        x: Any,
        y: int | None = None,
        data: Any = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Embeds one example and adds it, with `y` and `data`, to the index.

        Args:
            x: One example (without batch axis).
            y: Its class, or `None`.
            data: An item kept with it, or `None`.
            build: Kept for 0.17's signature.
            verbose: Print progress if 1. Defaults to 1.

        Raises:
            StaleIndexError: As `index`.
        """
        x = self._index_batch(np.asarray(x)[None])
        fingerprint = self._fingerprint_to_record()
        if verbose:
            print("[Indexing 1 example]")
        self._index.add(self._embed(x), label=y, data=data, build=build)
        self._index.embedding_fingerprint = fingerprint

    # The lifecycle (see `Indexer.remove`, `Indexer.upsert`, `Indexer.compact`).

    def remove_from_index(self, ids: Any) -> None:
        """Removes the indexed examples `ids` (`Lookup.id`): no lookup returns them again.

        Args:
            ids: Distinct ids of indexed examples.

        Raises:
            ValueError: If an id is not an integer, is given twice or is not
                an indexed example's; nothing is removed then.
        """
        self._index.remove(ids)

    def upsert_index(self, ids: Any, x: Any, y: Any = None, data: Any = None) -> None:
        """Embeds `x` and puts each example under its id, replacing the one it held, if any.

        Args:
            ids: One distinct non-negative integer id per example: an
                indexed example's (replaced) or a new one (added).
            x: A batch of examples.
            y: Their integer classes, or `None`.
            data: Items kept with them (returned by lookups), or `None`.

        Raises:
            ValueError: As `index`, or if `ids` are not one valid id per
                example; nothing changes then.
            StaleIndexError: As `index`.
        """
        x = self._index_batch(x)
        check_length("y", y, len(x))
        check_length("data", data, len(x))
        check_length("ids", ids, len(x), required=True)
        fingerprint = self._fingerprint_to_record()
        self._index.upsert(ids, self._embed(x), labels=y, data=data)
        self._index.embedding_fingerprint = fingerprint

    def compact_index(self) -> None:
        """Drops removed examples from the index's memory and files; lookups are unchanged."""
        self._index.compact()

    # Looking up.

    def lookup(self, x: Any, k: int = 5, verbose: int = 1) -> list[list[Lookup]]:
        """Returns, per example of `x`, its `k` nearest indexed examples, nearest first.

        Args:
            x: A batch of examples; an empty one (`n = 0`) returns `[]`.
            k: Neighbours per example. Defaults to 5.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Per example, `k` `Lookup`s by increasing distance (fewer when an
            approximate search found fewer; see `Indexer.batch_lookup`): a
            list of `n` lists, empty for an empty batch. A `k` above
            `index_size()` returns the whole index, with a warning, as 0.17
            did. A stale index (see the class) warns `StaleIndexWarning`.

        Raises:
            ValueError: If the index is empty, `k` is below 1 or `x` does not
                fit the model's input.
        """
        x = self._index_batch(x)
        self._check_lookup(k)
        return self._index.batch_lookup(self._embed(x), k=k, verbose=verbose)

    def single_lookup(self, x: Any, k: int = 5) -> list[Lookup]:
        """Returns the `k` nearest indexed examples of one example, nearest first.

        Args:
            x: One example (without batch axis).
            k: Neighbours. Defaults to 5.

        Returns:
            As one row of `lookup`'s (and its warnings).
        """
        x = self._index_batch(np.asarray(x)[None])
        self._check_lookup(k)
        return self._index.single_lookup(self._embed(x), k=k)

    # Bookkeeping.

    def reset_index(self) -> None:
        """Empties the index (and forgets its calibration and fingerprint)."""
        self._index.reset()

    def index_size(self) -> int:
        """Returns the number of indexed examples."""
        return self._index.size()

    def index_summary(self) -> None:
        """Prints the index's configuration and statistics."""
        self._index.print_stats()

    def to_data_frame(self, num_items: int = 0) -> Any:
        """Returns the indexed records as a pandas `DataFrame` (needs pandas)."""
        return self._index.to_data_frame(num_items=num_items)

    def save_index(self, filepath: str | Path, compression: bool = True) -> None:
        """Writes the index to `index_path(filepath)` (beside a `.keras` file), whole or not at all.

        The index is written into a hidden sibling folder and switched in
        by renames once flushed to disk (see `Indexer.save`), with the
        identity of the model (the SHA-256 of its weights and, if
        `filepath` is a saved model file, of that file), so that
        `load_index` refuses it for another model.

        Args:
            filepath: The model's file (`model.keras`) or a folder.
            compression: Compress the stored data. Defaults to `True`.

        Raises:
            OSError: If a file cannot be written (it names the file and,
                for a full disk, the space left); the previous save is kept.
        """
        model_file, folder = Path(filepath), index_path(filepath)
        recover_pair(model_file, folder)
        identity = {"weights_sha256": self._weights_sha256()}
        if is_model_file(model_file) and model_file.is_file():
            identity["sha256"] = _atomic.sha256_file(model_file)
        staged = persistence.stage_index(
            self._index.to_saved_index(), folder, compression=compression, model=identity
        )
        try:
            old = _atomic.switch_dir(staged, folder)
        except OSError as error:
            _atomic.discard_dir(staged)
            _atomic.recover_dir(folder)
            raise persistence.save_failed(error, "Saving the index", folder) from error
        _atomic.discard_dir(old)

    def load_index(self, filepath: str | Path, safe_mode: bool = True) -> None:
        """Replaces the index by the one `save_index(filepath)` (or `save`) wrote.

        The saved index must have the model's embedding size and, if the
        model already has an index (from `compile` or `create_index`), its
        distance; an index saved by `save` or `save_index` must also belong
        to this model (saved from a model of the same weights) and to the
        model file `filepath` beside it. On any error the model keeps its
        index. A save killed while switching its files in leaves the old
        pair or the new one, and `load_index` reads the pair the model file
        belongs to. The index keeps the fingerprint of the weights that made
        it (see the class); a non-empty index saved without one loads with a
        `UserWarning` that its freshness cannot be checked.

        Args:
            filepath: What was given to `save_index` or `save`.
            safe_mode: If `True` (the default), an index whose records'
                data were saved as pickled Python objects is refused, since
                unpickling runs code the file names; `False` loads it (as
                `keras.saving.load_model(safe_mode=False)`): only for an
                index you trust.

        Raises:
            FileNotFoundError: If nothing was saved there.
            ValueError: If the saved index has another distance or size, is
                corrupt, belongs to another model or model file, or (in
                safe mode) holds pickled data.
        """
        folder = index_of_model_file(Path(filepath))
        current = self._ix
        embedding_output = None if current is None else current.embedding_output
        index = Indexer.load(
            folder,
            verbose=0,
            distance=None if current is None else current.distance,
            embedding_size=self._index_embedding_size(embedding_output),
            safe_mode=safe_mode,
        )
        recorded = (Indexer.read_metadata(folder).get("model") or {}).get("weights_sha256")
        if recorded is not None and recorded != self._weights_sha256():
            raise ValueError(
                f"The index in {str(folder)!r} was saved with a model of other weights than "
                f"this {type(self).__name__}'s, so its embeddings are not this model's. Load "
                "the model saved with it (keras.saving.load_model of the file beside it), "
                "or index the examples again with this model."
            )
        self._ix = index
        if index.size() and index.embedding_fingerprint is None:
            warnings.warn(
                f"The index in {str(folder)!r} records no fingerprint of the weights that made "
                "its embeddings (it was saved before fingerprints were recorded, or filled "
                "through the Indexer directly), so whether they are this model's cannot be "
                "checked: lookups and export_serving will not say if they are stale. Call "
                "model.reset_index() then model.index(x, y) to record one.",
                UserWarning,
                stacklevel=2,
            )

    def _weights_sha256(self) -> str:
        """The hex SHA-256 of the model's weights (shapes, dtypes and values, in order)."""
        return weights_sha256(self.get_weights())

    # Which weights made the index.

    def _embedding_fingerprint(self, exact: bool = True) -> str:
        """The `weights_sha256` of `_index_weights()`, or if not `exact` its cached value.

        The cache holds while `weights_sample_key` is unchanged.
        """
        variables = self._index_weights()
        key = weights_sample_key(variables, getattr(self, "optimizer", None))
        cached = self._fingerprint_cache
        if exact or cached is None or cached[0] != key:
            cached = (key, weights_sha256(variables))
            self._fingerprint_cache = cached
        return cached[1]

    def _stale_fingerprints(self, exact: bool = True) -> tuple[str, str] | None:
        """`(recorded, current)` fingerprints if the index is stale, else `None`."""
        index = self._index
        recorded = index.embedding_fingerprint
        if recorded is None or index.size() == 0:
            return None
        current = self._embedding_fingerprint(exact)
        return None if current == recorded else (recorded, current)

    def _stale_message(self) -> str:
        return (
            f"The index of {self.name!r} holds embeddings that other weights made: the model's "
            "embedding weights changed (trained, set or loaded) since model.index, so the "
            "index answers with the neighbours of the old model"
        )

    def _warn_if_stale(self) -> None:
        """Warns `StaleIndexWarning`, once per change of the weights, if the index is stale."""
        stale = self._stale_fingerprints(exact=False)
        if stale is None or " ".join(stale) == self._stale_warned:
            return
        self._stale_warned = " ".join(stale)
        warnings.warn(
            StaleIndexWarning(
                f"{self._stale_message()}. Call model.reset_index() then model.index(x, y) "
                "with all the examples to embed them again."
            ),
            # The user's call: lookup (or another verb), _check_lookup, here.
            stacklevel=4,
        )

    def _fingerprint_to_record(self) -> str | None:
        """The fingerprint `index` records, once sure adding keeps one model's embeddings.

        Raises:
            StaleIndexError: If the index holds embeddings of other weights.
        """
        index = self._index
        current = self._embedding_fingerprint()
        if index.size() == 0:
            return current
        if index.embedding_fingerprint not in (None, current):
            raise StaleIndexError(
                f"{self._stale_message()}; adding embeddings of the present weights would mix "
                "two models' embeddings in one index. Nothing was added. Call "
                "model.reset_index() then model.index(x, y) with all the examples."
            )
        # An index of unknown weights stays unknown.
        return index.embedding_fingerprint

    def _embed(self, x: np.ndarray) -> Any:
        """`_index_embeddings(x)`; `[0, dim]` zeros for an empty batch (Keras' predict fails)."""
        if len(x) == 0:
            return np.zeros((0, self._index.embedding_size), np.float32)
        return self._index_embeddings(x)

    # Checks made before any prediction.

    def _index_batch(self, x: Any) -> Any:
        if is_stream(x):
            raise ValueError(
                f"Expected an array of examples, got a stream ({type(x).__name__}): only "
                "index() takes a tf.data.Dataset or an iterator of batches. Pass "
                "np.concatenate of its batches, or call the verb batch by batch."
            )
        if isinstance(x, (tf.Tensor, tf.Variable)):
            x = x.numpy()
        x = np.asarray(x)
        expected = self._index_input_shape()
        if expected is not None:
            x = keras_rank_adjusted(x, expected)
            shape = x.shape[1:]
            fits = len(shape) == len(expected) and all(
                e is None or e == s for e, s in zip(expected, shape, strict=True)
            )
            if x.ndim == 0 or not fits:
                raise ValueError(
                    f"Expected a batch of examples of shape {tuple(expected)}; got an array of "
                    f"shape {x.shape}. Pass x of shape (n, *{tuple(expected)}) (for one "
                    "example, index_single/single_lookup)."
                )
        return x

    def _check_lookup(self, k: int) -> None:
        size = self._index.size()
        if size == 0:
            raise ValueError(
                "The index is empty: call model.index(x, y) (or load_index) before looking "
                "up, evaluating, calibrating or matching."
            )
        # A k above the index size is not refused: the index returns all it holds and
        # warns, as 0.17 returned fewer neighbours.
        check_int("k", k, minimum=1, owner=type(self).__name__)
        self._warn_if_stale()
