"""Where a model's index is saved beside its model file, and how the two are kept a pair.

`index_path` names the index folder of a model file (or folder);
`recover_pair` resolves a save of the two that a crash interrupted, and
`index_of_model_file` finds the index folder that belongs to a model
file, which `IndexMixin.load_index` reads.
"""

from __future__ import annotations

from pathlib import Path

from tensorflow_similarity import _atomic
from tensorflow_similarity.indexer import Indexer


def index_path(filepath: str | Path) -> Path:
    """Returns the folder `save_index(filepath)` writes: beside a `.keras` file, else inside.

    `model.keras` -> `model.index/`; any other path -> `path/index/` (0.17's
    layout, when `path` was a SavedModel folder).
    """
    filepath = Path(filepath)
    if filepath.suffix in (".keras", ".h5"):
        return filepath.with_suffix(".index")
    return filepath / "index"


def is_model_file(path: Path) -> bool:
    """Whether `path` names a model file (`.keras` or `.h5`) rather than a folder."""
    return path.suffix in (".keras", ".h5")


def _recorded_model_sha256(folder: Path) -> str | None:
    """The SHA-256 of the model file the index in `folder` was saved with, if recorded."""
    try:
        metadata = Indexer.read_metadata(folder)
    except (FileNotFoundError, ValueError):
        return None
    return (metadata.get("model") or {}).get("sha256")


def recover_pair(model_file: Path, folder: Path) -> None:
    """Resolves a save of a model file and its index folder that a crash interrupted.

    `IndexMixin.save` switches the index folder in first, then the model
    file: if the crash came between the two, the staged model file the new
    index records is switched in too (rolling forward); any other state is
    resolved as `_atomic.recover_dir` does, and a staged model file left is
    deleted.
    """
    staged = _atomic.staging_path(model_file)
    if (
        staged.is_file()
        and folder.is_dir()
        and _atomic.backup_path(folder).is_dir()
        and _recorded_model_sha256(folder) == _atomic.sha256_file(staged)
    ):
        _atomic.replace_file(staged, model_file)
    staged.unlink(missing_ok=True)
    _atomic.recover_dir(folder)


def index_of_model_file(filepath: Path) -> Path:
    """The index folder of the model file `filepath`, checked to belong to it.

    Between the two renames of a save, the index folder is new and the
    model file old: the old index, kept as the folder's backup until the
    model file is switched, is the one that belongs to it.

    Raises:
        ValueError: If the index was saved with another model file.
    """
    folder = _atomic.readable_dir(index_path(filepath))
    if not (is_model_file(filepath) and filepath.is_file()):
        return folder
    recorded = _recorded_model_sha256(folder)
    if recorded is None:
        return folder
    found = _atomic.sha256_file(filepath)
    if recorded == found:
        return folder
    backup = _atomic.backup_path(index_path(filepath))
    if backup.is_dir() and _recorded_model_sha256(backup) == found:
        return backup
    raise ValueError(
        f"The index in {str(folder)!r} was saved with another {filepath.name} than the one "
        f"beside it (the SHA-256 of {str(filepath)!r} is not the one the index records): the "
        "model file was replaced or the index copied from another save since. Nothing was "
        "loaded. Save the model and its index together again (model.save), or load the "
        "index saved with this model file."
    )
