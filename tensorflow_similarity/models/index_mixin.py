"""The old path of `IndexMixin`, kept importable: the index API lives in `models/index/`."""

from tensorflow_similarity.models.index import IndexMixin, canonical_distance, index_path

__all__ = ["IndexMixin", "canonical_distance", "index_path"]
