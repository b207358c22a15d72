"""The index API a model gains by mixing in `IndexMixin`: index, look up, calibrate, match.

`IndexMixin` itself holds what ties the index to the model: compiling
with it and saving the model with it. The verbs come from the mixins it
builds on (`index_lookup_mixin.py`, `index_calibration_mixin.py`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import keras

from tensorflow_similarity import _atomic
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer import persistence
from tensorflow_similarity.models.index_calibration_mixin import IndexCalibrationMixin
from tensorflow_similarity.models.index_fingerprint import StaleIndexError, StaleIndexWarning
from tensorflow_similarity.models.index_lookup_mixin import (
    canonical_distance,
    index_path,
    recover_pair,
)
from tensorflow_similarity.search import Search
from tensorflow_similarity.serving import ServingExport, export_model
from tensorflow_similarity.stores import Store

__all__ = ["IndexMixin", "canonical_distance", "index_path"]


class IndexMixin(IndexCalibrationMixin):
    """0.17's index API for a Keras model whose predictions are embeddings.

    The model embeds (with `predict`, so under the strategy the model was
    built in, on all its replicas) and its `Indexer` searches on the host.
    Arguments are checked before anything is predicted or changed: a bad
    call leaves the index as it was. A model gets its index from `compile`
    or `create_index`; one used before either gets the default index
    (cosine distance, exact linear search, memory store).

    Indexing, lookups, the index's bookkeeping and persistence, and what
    a stale index does (one whose embeddings other weights made) come from
    `IndexLookupMixin`; what uses the neighbours' labels
    (`evaluate_retrieval`, `calibrate`, `match`, `evaluate_classification`)
    from `IndexCalibrationMixin`. This class adds `save`, which writes the
    model and, beside it, its index, and `export_serving`, which writes
    both as one SavedModel that serves with TensorFlow alone. The model's `compile` calls
    `_compile_index`, and its compile config holds the index settings, so
    `keras.saving.load_model` recreates the index.

    A class mixing this in provides `_index_embeddings(x)` (the embeddings
    of a batch, as the indexer takes them), `_index_embedding_size(output)`
    and `_index_input_shape()`.

    Attributes:
        index_batch_size: The batch size of the predictions the index API
            makes (Keras' default of 32 makes many small distributed steps).
            Defaults to 256.
    """

    # Compiling with an index.

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

    # Saving the model with its index.

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
        model_file = Path(filepath)
        with_index = save_index and self._ix is not None
        if (
            model_file.suffix not in (".keras", ".h5")
            or not kwargs.get("zipped", True)
            or (not overwrite and model_file.exists())
        ):
            # Keras' own checks and prompts (an unzipped folder, "overwrite?") apply.
            super().save(
                filepath, overwrite=overwrite, include_optimizer=include_optimizer, **kwargs
            )
            if with_index:
                self.save_index(filepath, compression=compression)
            return
        folder = index_path(model_file)
        recover_pair(model_file, folder)
        staged_model = _atomic.staging_path(model_file)
        what = f"{type(self).__name__}.save"
        try:
            super().save(
                staged_model, overwrite=True, include_optimizer=include_optimizer, **kwargs
            )
            _atomic.fsync_file(staged_model)
            if not with_index:
                _atomic.replace_file(staged_model, model_file)
                return
            identity = {
                "sha256": _atomic.sha256_file(staged_model),
                "weights_sha256": self._weights_sha256(),
            }
            staged_index = persistence.stage_index(
                self._index.to_saved_index(), folder, compression=compression, model=identity
            )
        except BaseException as error:
            staged_model.unlink(missing_ok=True)
            if isinstance(error, OSError):
                raise persistence.save_failed(error, what, model_file) from error
            raise
        # The index first, then the model file: until the model file is switched its old
        # index stays as the folder's backup, which load_index reads for the old file.
        try:
            old_index = _atomic.switch_dir(staged_index, folder)
        except OSError as error:
            _atomic.discard_dir(staged_index)
            staged_model.unlink(missing_ok=True)
            _atomic.recover_dir(folder)
            raise persistence.save_failed(error, what, folder) from error
        try:
            _atomic.replace_file(staged_model, model_file)
        except OSError as error:
            _atomic.discard_dir(folder)
            staged_model.unlink(missing_ok=True)
            _atomic.recover_dir(folder)
            raise persistence.save_failed(error, what, model_file) from error
        _atomic.discard_dir(old_index)

    # Serving.

    def export_serving(
        self,
        path: str | Path,
        k: int = 5,
        *,
        include_index: bool = True,
        uint8_input: bool = False,
        class_names: Any = None,
        overwrite: bool = False,
        tflite: bool = False,
        verbose: int = 1,
        allow_stale_index: bool = False,
        index_location: str = "auto",
    ) -> ServingExport:
        """Writes the model and its index as a SavedModel that serves with TensorFlow alone.

        `serving.export_model(self, path, k, ...)`, which documents the
        signatures (`embed`; `lookup` when the index is not empty) and the
        size limit of the index.

        A stale index (its embeddings made by other weights than the
        model's now, see `IndexLookupMixin`) is refused before anything is
        written: the export's `embed` would disagree with the embeddings its
        `lookup` searches. Re-index (`reset_index()`, then `index(x, y)`),
        or pass `allow_stale_index=True` to export it anyway (with a
        `StaleIndexWarning`). An index of unknown fingerprint is exported.

        Args:
            path: The SavedModel folder to write.
            k: Neighbours `lookup` returns. Defaults to 5.
            include_index: Export `lookup` when the index is not empty.
                Defaults to `True`.
            uint8_input: Take uint8 images in 0-255, scaled by 1/255 in the
                graph. Defaults to `False`.
            class_names: The names `lookup`'s `label_names` holds, by label.
                Defaults to none (each label's digits).
            overwrite: Replace an earlier export at `path`. Defaults to `False`.
            tflite: Also write a `.tflite` file per signature. Defaults to
                `False`.
            verbose: Print what was written if 1. Defaults to 1.
            allow_stale_index: Export a stale index rather than refuse it.
                Defaults to `False`.
            index_location: `"auto"` (the default: in the graph up to
                `serving.MAX_INDEX_BYTES`, beside the SavedModel above it),
                `"graph"` or `"external"` (saved beside it, served by
                `serving.IndexServer`); see `export_model`.

        Returns:
            The `ServingExport` of what was written.

        Raises:
            StaleIndexError: If `include_index` and the index is stale (and
                `allow_stale_index` is `False`); nothing is written.
            TypeError: If `allow_stale_index` is not a bool.
        """
        if not isinstance(allow_stale_index, bool):
            raise TypeError(f"allow_stale_index must be True or False; got {allow_stale_index!r}.")
        stale = include_index and self._ix is not None and self._stale_fingerprints()
        if stale:
            if not allow_stale_index:
                raise StaleIndexError(
                    f"{self._stale_message()}. Nothing was exported to {str(path)!r}. Call "
                    "model.reset_index() then model.index(x, y) with all the examples before "
                    "export_serving, or pass allow_stale_index=True to export it as it is."
                )
            warnings.warn(
                StaleIndexWarning(
                    f"{self._stale_message()}; exporting it as allow_stale_index=True asks."
                ),
                stacklevel=2,
            )
        return export_model(
            self,
            path,
            k,
            include_index=include_index,
            uint8_input=uint8_input,
            class_names=class_names,
            overwrite=overwrite,
            tflite=tflite,
            verbose=verbose,
            index_location=index_location,
        )
