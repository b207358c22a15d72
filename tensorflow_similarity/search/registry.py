"""Search indexes by name, as `compile(search="linear")` takes them."""

from __future__ import annotations

from typing import Any

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.search.faiss_ondisk_search import FaissOnDiskSearch
from tensorflow_similarity.search.faiss_search import FaissSearch
from tensorflow_similarity.search.linear_search import LinearSearch
from tensorflow_similarity.search.milvus_search import MilvusSearch
from tensorflow_similarity.search.search import Search

SEARCH_NAMES: dict[str, type[Search]] = {
    "linear": LinearSearch,
    "faiss": FaissSearch,
    "faiss_ondisk": FaissOnDiskSearch,
    "milvus": MilvusSearch,
}


def make_search(search: Search | str, distance: Distance | str, dim: int, **kwargs: Any) -> Search:
    """Returns a new index named `search` (`"linear"`, `"faiss"`, `"milvus"`), or `search` itself.

    Args:
        search: A `Search` (returned as is, after checking it matches
            `distance` and `dim`) or a name.
        distance: The distance of a new index.
        dim: The embedding size.
        **kwargs: More arguments of a new index (`algo="hnsw"`, `uri="index.db"`,
            ...; `"milvus"` needs `uri`).

    Returns:
        A `Search`.

    Raises:
        ValueError: If the name is unknown, or a given index has another
            dim than `dim`.
    """
    if isinstance(search, Search):
        if search.dim != dim:
            raise ValueError(
                f"The search index has dim={search.dim} but the embeddings have {dim} "
                f"features. Create it with dim={dim}."
            )
        return search
    if not isinstance(search, str) or search.strip().lower() not in SEARCH_NAMES:
        raise ValueError(
            f"Unknown search {search!r}. Pass a Search or one of {sorted(SEARCH_NAMES)}."
        )
    return SEARCH_NAMES[search.strip().lower()](distance=distance, dim=dim, **kwargs)
