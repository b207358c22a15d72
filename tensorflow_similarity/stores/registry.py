"""The stores an index can be saved with and rebuilt from, by class name."""

from __future__ import annotations

from tensorflow_similarity.stores.memmap_store import MemmapStore
from tensorflow_similarity.stores.memory_store import MemoryStore
from tensorflow_similarity.stores.store import Store

STORE_CLASSES: dict[str, type[Store]] = {cls.__name__: cls for cls in (MemoryStore, MemmapStore)}
