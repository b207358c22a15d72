"""Key-value stores of indexed records `(embedding, label, data)`.

`MemoryStore` keeps them in memory; `MemmapStore` in files on disk, for
indexes larger than memory.
"""

from __future__ import annotations

from tensorflow_similarity.stores.memmap_store import MemmapStore
from tensorflow_similarity.stores.memory_store import MemoryStore
from tensorflow_similarity.stores.registry import STORE_CLASSES
from tensorflow_similarity.stores.store import Store

__all__ = ["STORE_CLASSES", "MemmapStore", "MemoryStore", "Store"]
