"""What a run trained on, recorded in run.json so that `--resume` refuses changed data.

A folder's fingerprint is its image files (the ones the loader reads), by
path relative to the folder, with each one's size and SHA-256. An embedded
source's (glyphs, digits) or a TensorFlow Datasets set's is the loader's
identity: its name, the image size, and the versions its images depend on.

A run.json written before fingerprints existed has none: such a run resumes
with a warning that its data cannot be checked, and records the fingerprint
from then on.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path
from typing import Any

from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.datasets import EMBEDDED_SOURCES
from tensorflow_similarity.datasets.tfds import TFDS_PREFIX

# The packages whose versions an embedded or TFDS source's images depend on.
_LOADER_PACKAGES = {
    "glyphs": ("matplotlib", "pillow", "fonttools"),
    "digits": ("scikit-learn",),
    "tfds": ("tensorflow-datasets",),
}
# Changes of this module's own fingerprints: a run.json with another one is not compared.
FINGERPRINT_VERSION = 1


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def data_fingerprint(spec: str, files: list[Path] | None, image_size: int) -> dict[str, Any]:
    """Returns the fingerprint of `--data`, as run.json holds it.

    Args:
        spec: `--data`.
        files: For a folder, the image files `datasets.check_data_spec`
            found; `None` for the other sources.
        image_size: `--image-size`.

    Returns:
        `{"version", "source", "image_size", ...}` with `"files"` (path:
        `[size, sha256]`) for a folder, `"packages"` (name: version) else.

    Raises:
        UsageError: If an image file cannot be read, naming it.
    """
    fingerprint: dict[str, Any] = {
        "version": FINGERPRINT_VERSION,
        "source": spec,
        "image_size": image_size,
    }
    if files is None:
        kind = "tfds" if spec.startswith(TFDS_PREFIX) else spec
        fingerprint["packages"] = {name: _version(name) for name in _LOADER_PACKAGES.get(kind, ())}
        if spec in EMBEDDED_SOURCES:
            fingerprint["embedded"] = True
        return fingerprint
    root = Path(spec).resolve()
    fingerprint["files"] = {
        path.resolve().relative_to(root).as_posix()
        if path.resolve().is_relative_to(root)
        else str(path): _size_and_hash(path)
        for path in files
    }
    return fingerprint


def _size_and_hash(path: Path) -> list[Any]:
    """`[size, sha256]` of an image file of `--data`.

    Raises:
        UsageError: If the file cannot be read, naming it.
    """
    try:
        return [path.stat().st_size, _sha256(path)]
    except OSError as error:
        raise UsageError(
            f"cannot read image {str(path)!r} of --data ({error.strerror or error}): a damaged "
            "file or disk, or one removed while tfsim read the folder. Check the disk, and "
            "replace or remove the file."
        ) from None


def _listed(names: list[str], limit: int = 3) -> str:
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def describe_change(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """Says what differs between two fingerprints, or `None` if they match."""
    if saved.get("files") is None or current.get("files") is None:
        changed = [
            f"{key} {saved.get(key)!r} -> {current.get(key)!r}"
            for key in ("source", "image_size", "packages")
            if saved.get(key) != current.get(key)
        ]
        return "; ".join(changed) or None
    before, after = saved["files"], current["files"]
    parts = []
    for words, names in (
        ("added", sorted(set(after) - set(before))),
        ("removed", sorted(set(before) - set(after))),
        ("changed", sorted(n for n in set(before) & set(after) if before[n] != after[n])),
    ):
        if names:
            parts.append(f"{len(names)} file{'s' * (len(names) != 1)} {words} ({_listed(names)})")
    return "; ".join(parts) or None


def check_unchanged(saved: dict[str, Any] | None, current: dict[str, Any]) -> str | None:
    """Raises `UsageError` if the data of a resumed run changed since it started.

    Args:
        saved: The fingerprint run.json recorded, `None` if it has none.
        current: The fingerprint of the data now.

    Returns:
        A warning for a run.json that records no fingerprint (written by an
        earlier tfsim), else `None`.

    Raises:
        UsageError: If the fingerprints differ, naming what changed.
    """
    if not isinstance(saved, dict) or saved.get("version") != FINGERPRINT_VERSION:
        return (
            "the interrupted run's run.json records no fingerprint of its data (an earlier "
            "tfsim wrote it), so a change of --data since cannot be detected; resuming."
        )
    change = describe_change(saved, current)
    if change:
        raise UsageError(
            f"--data {current['source']!r} changed since the interrupted run started: "
            f"{change}. --resume would continue on other data than the run's backup was "
            "trained on; restore the data, or start a new run with --overwrite (or in another "
            "--output)."
        )
    return None
