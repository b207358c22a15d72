"""A model's index: `IndexMixin`, which `SimilarityModel` and `ContrastiveModel` mix in.

`mixin.py` defines the class; its verbs live in `adding.py`, `lookups.py`,
`evaluation.py`, `saving.py` and `freshness.py`; `arguments.py` checks
their arguments, `files.py` places the index beside the model file, and
`fingerprint.py` names the weights that made an index's embeddings.
"""

from tensorflow_similarity.models.index.arguments import canonical_distance
from tensorflow_similarity.models.index.files import index_path
from tensorflow_similarity.models.index.fingerprint import StaleIndexError, StaleIndexWarning
from tensorflow_similarity.models.index.mixin import IndexMixin

__all__ = ["IndexMixin", "StaleIndexError", "StaleIndexWarning", "canonical_distance", "index_path"]
