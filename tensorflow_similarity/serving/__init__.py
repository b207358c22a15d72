"""Serving: a trained model and its index as one SavedModel that needs only TensorFlow.

`export_model(model, path, k)` (or `model.export_serving(path, k)`) writes a
SavedModel with an `embed` signature and, when the model has an index, a
`lookup` signature that searches it exactly in the graph: it loads with
`tf.saved_model.load` and serves under TensorFlow Serving without this
package. `convert_to_tflite` converts a signature to TensorFlow Lite, and
`TFLiteSignature` runs one with its images checked. An
index over `MAX_INDEX_BYTES` (see `index_snapshot`), or one exported with
`index_location="external"`, is saved beside the SavedModel instead, and
`IndexServer` answers its `lookup`. The guide: docs/guides/serving.md.
"""

from __future__ import annotations

from tensorflow_similarity.serving.destination import check_destination
from tensorflow_similarity.serving.export import INDEX_LOCATIONS, ServingExport, export_model
from tensorflow_similarity.serving.index_server import IndexServer
from tensorflow_similarity.serving.index_snapshot import (
    MAX_INDEX_BYTES,
    IndexSnapshot,
    check_index_size,
    snapshot_index,
)
from tensorflow_similarity.serving.similarity_serving import SimilarityServing
from tensorflow_similarity.serving.tflite import convert_to_tflite
from tensorflow_similarity.serving.tflite_signature import TFLiteSignature

__all__ = [
    "INDEX_LOCATIONS",
    "MAX_INDEX_BYTES",
    "IndexServer",
    "IndexSnapshot",
    "ServingExport",
    "SimilarityServing",
    "TFLiteSignature",
    "check_destination",
    "check_index_size",
    "convert_to_tflite",
    "export_model",
    "snapshot_index",
]
