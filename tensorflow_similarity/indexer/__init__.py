"""The index: nearest-neighbour search over embeddings, with their labels and data.

`Indexer` (in `indexer.py`) is the whole API: add, look up, evaluate,
calibrate, match, save and load. `persistence.py` holds its on-disk format,
which it writes from and reads into a `SavedIndex` record (`saved_index.py`).
"""

from tensorflow_similarity.indexer.indexer import SEARCHES, Indexer
from tensorflow_similarity.indexer.persistence import FORMAT_VERSION, METADATA_FILE
from tensorflow_similarity.indexer.saved_index import SavedIndex

__all__ = ["FORMAT_VERSION", "METADATA_FILE", "SEARCHES", "Indexer", "SavedIndex"]
