"""Key-value stores of indexed records `(embedding, label, data)`: `MemoryStore`."""

from __future__ import annotations

from tensorflow_similarity.stores.memory_store import MemoryStore
from tensorflow_similarity.stores.store import Store

__all__ = ["MemoryStore", "Store"]
