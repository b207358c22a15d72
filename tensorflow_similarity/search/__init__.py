"""Nearest-neighbour search indexes: the exact `LinearSearch` (the default), `FaissSearch`,
`FaissOnDiskSearch` (inverted lists on disk, beyond memory) and `MilvusSearch` (a Milvus
Lite file or a Milvus cluster).

`FaissSearch` and `MilvusSearch` import faiss and pymilvus when created, so
the package imports without them.

Every index has the same verbs: `add`, `batch_add(embeddings, idxs)`,
`lookup`, `batch_lookup(embeddings, k) -> (idxs, distances)` nearest first,
`size`, `reset`, `save(path)`/`load(path)` and `get_config`.
"""

from __future__ import annotations

from tensorflow_similarity.search.faiss_ondisk_search import FaissOnDiskSearch
from tensorflow_similarity.search.faiss_search import FaissSearch
from tensorflow_similarity.search.linear_search import LinearSearch, exact_nearest
from tensorflow_similarity.search.milvus_search import MilvusSearch
from tensorflow_similarity.search.registry import SEARCH_NAMES, make_search
from tensorflow_similarity.search.search import Search

__all__ = [
    "SEARCH_NAMES",
    "FaissOnDiskSearch",
    "FaissSearch",
    "LinearSearch",
    "MilvusSearch",
    "Search",
    "exact_nearest",
    "make_search",
]
