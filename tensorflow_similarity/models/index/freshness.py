"""Whether the index's embeddings are the model's: `IndexMixin`'s fingerprint bookkeeping.

`index` records the fingerprint of the embedding weights
(`fingerprint.weights_sha256`) in an empty index; lookups compare it with
the weights' now and warn once per change (`StaleIndexWarning`), adding
to a stale index is refused (`StaleIndexError`). These are methods of
`IndexMixin` (which binds them, see `mixin.py`).
"""

from __future__ import annotations

import warnings

from tensorflow_similarity.models.index.fingerprint import (
    StaleIndexError,
    StaleIndexWarning,
    weights_sample_key,
    weights_sha256,
)


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
