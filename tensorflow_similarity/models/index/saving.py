"""`IndexMixin`'s verbs that write or read files: save and load the index, export for serving.

`save_index`, `load_index` and `export_serving` are methods of
`IndexMixin` (which binds them, see `mixin.py`); `save_with_index` is the
body of `IndexMixin.save`: the model file and its index written as a
pair, all or nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorflow_similarity import _atomic
from tensorflow_similarity.indexer import Indexer, persistence
from tensorflow_similarity.models.index.files import (
    index_of_model_file,
    index_path,
    is_model_file,
    recover_pair,
)
from tensorflow_similarity.models.index.fingerprint import (
    StaleIndexError,
    StaleIndexWarning,
    weights_sha256,
)
from tensorflow_similarity.serving import ServingExport, export_model

__all__ = ["export_serving", "load_index", "save_index", "save_with_index"]


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


def load_index(
    self,
    filepath: str | Path,
    safe_mode: bool = True,
    *,
    search_options: dict[str, Any] | None = None,
) -> None:
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
        search_options: Arguments of the saved search's class that a save
            does not record, passed to `Indexer.load`: a `MilvusSearch`'s
            `token` or a `FaissOnDiskSearch`'s working `directory`.
            Defaults to `None` (none).

    Raises:
        FileNotFoundError: If nothing was saved there.
        ValueError: If the saved index has another distance or size, is
            corrupt, belongs to another model or model file, or (in
            safe mode) holds pickled data; or if `search_options` names
            an argument the save recorded or the search does not take.
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
        search_options=search_options,
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


def save_with_index(
    model: Any,
    keras_save: Callable[..., None],
    filepath: str | Path,
    save_index: bool,
    compression: bool,
    overwrite: bool,
    include_optimizer: bool,
    **kwargs: Any,
) -> None:
    """Writes `model` with `keras_save` and its index beside the file, as a pair.

    The body of `IndexMixin.save` (which documents it); `keras_save` is
    `keras.Model.save` bound to the model.
    """
    model_file = Path(filepath)
    with_index = save_index and model._ix is not None
    if (
        model_file.suffix not in (".keras", ".h5")
        or not kwargs.get("zipped", True)
        or (not overwrite and model_file.exists())
    ):
        # Keras' own checks and prompts (an unzipped folder, "overwrite?") apply.
        keras_save(filepath, overwrite=overwrite, include_optimizer=include_optimizer, **kwargs)
        if with_index:
            model.save_index(filepath, compression=compression)
        return
    folder = index_path(model_file)
    recover_pair(model_file, folder)
    staged_model = _atomic.staging_path(model_file)
    what = f"{type(model).__name__}.save"
    try:
        keras_save(staged_model, overwrite=True, include_optimizer=include_optimizer, **kwargs)
        _atomic.fsync_file(staged_model)
        if not with_index:
            _atomic.replace_file(staged_model, model_file)
            return
        identity = {
            "sha256": _atomic.sha256_file(staged_model),
            "weights_sha256": model._weights_sha256(),
        }
        staged_index = persistence.stage_index(
            model._index.to_saved_index(), folder, compression=compression, model=identity
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
