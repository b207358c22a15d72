"""The `tf.Module` an export saves: `embed`, and `lookup` over an index held in the graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from tensorflow_similarity.distances import CosineDistance, Distance
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.search import exact_nearest
from tensorflow_similarity.serving.index_snapshot import IndexSnapshot


class SimilarityServing(tf.Module):
    """A model's embedding and its index as TensorFlow functions, for `tf.saved_model.save`.

    `embed` maps a batch of images to the embeddings the index holds
    (L2-normalised for cosine); `lookup`, when there is an index, to the
    `k` nearest indexed items, searched exactly in the graph with the
    search of `LinearSearch` (`search.exact_nearest`) over the index's
    arrays, held as non-trainable variables (`index_embeddings`,
    `index_norms`, `index_ids`, `index_labels`; the class names as a
    constant): the ids, order and distances `model.lookup` returns, ties in
    index order. The network is traced once, in inference
    mode (`training=False`: batch norm, synchronised or not, is the plain
    inference batch norm), and only the variables it reads are tracked, so
    the saved artefact holds TensorFlow functions and variables and nothing
    of this package.

    Args:
        embeddings: `images -> embeddings` (the model's `_serving_embeddings`),
            traceable.
        input_shape: The shape of one image (no batch axis).
        distance: The index's `Distance` (whose cosine makes `embed`
            normalise).
        index: The index's arrays (`snapshot_index`), or `None` for `embed`
            alone.
        k: Neighbours `lookup` returns, at most the index's size.
        uint8_input: Take `uint8` images in 0-255 and scale them by `1/255`
            to the `[0, 1]` floats the model trained on. Defaults to `False`
            (float32 images as the model takes them).
    """

    def __init__(
        self,
        embeddings: Callable[[tf.Tensor], tf.Tensor],
        input_shape: Sequence[int | None],
        distance: Distance,
        index: IndexSnapshot | None = None,
        k: int = 5,
        uint8_input: bool = False,
    ) -> None:
        super().__init__(name="similarity_serving")
        spec = tf.TensorSpec(
            [None, *input_shape], tf.uint8 if uint8_input else tf.float32, name="images"
        )
        normalise = isinstance(distance, CosineDistance)

        def raw_embeddings(images: tf.Tensor) -> tf.Tensor:
            if uint8_input:
                images = tf.cast(images, tf.float32) / 255.0
            return tf.cast(embeddings(images), tf.float32)

        def embed(images: tf.Tensor) -> dict[str, tf.Tensor]:
            found = raw_embeddings(images)
            return {"embeddings": l2_normalize(found, axis=1) if normalise else found}

        # Concrete functions, traced once: saved as they are and as the signatures, so the
        # class names are written once (a tf.function is traced again when saved).
        self.embed = tf.function(
            embed, input_signature=[spec], autograph=False
        ).get_concrete_function()
        functions = [self.embed]
        index_variables: list[tf.Variable] = []
        if index is not None:
            # Variables, not graph constants: saved beside saved_model.pb (whose protocol
            # buffer stops at 2 GiB), read as they are, never copied and folded by the
            # graph optimiser on the first call (benchmark/serving_size.py).
            self.index_embeddings = tf.Variable(index.keys, trainable=False, name="embeddings")
            self.index_norms = tf.Variable(index.key_norms, trainable=False, name="norms")
            self.index_ids = tf.Variable(index.ids, trainable=False, name="ids")
            self.index_labels = tf.Variable(index.labels, trainable=False, name="labels")
            index_variables = [
                self.index_embeddings,
                self.index_norms,
                self.index_ids,
                self.index_labels,
            ]

            def lookup(images: tf.Tensor) -> dict[str, tf.Tensor]:
                distances, positions = exact_nearest(
                    index.distance,
                    raw_embeddings(images),
                    self.index_embeddings,
                    self.index_norms,
                    k,
                )
                return {
                    "ids": tf.gather(self.index_ids, positions),
                    "distances": distances,
                    "labels": tf.gather(self.index_labels, positions),
                    "label_names": tf.gather(
                        tf.constant(index.label_names.tolist(), tf.string), positions
                    ),
                }

            self.lookup = tf.function(
                lookup, input_signature=[spec], autograph=False
            ).get_concrete_function()
            functions.append(self.lookup)
        # What the traced functions read of the network (a ContrastiveModel's backbone, not
        # its heads), tracked so that they are saved; the network itself is not.
        seen: dict[int, tf.Variable] = {id(v): v for v in index_variables}
        for function in functions:
            for variable in function.variables:
                seen.setdefault(id(variable), variable)
        self.network_variables = list(seen.values())[len(index_variables) :]

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The serving signatures, by name: `embed`, and `lookup` when there is an index."""
        found = {"embed": self.embed}
        if hasattr(self, "lookup"):
            found["lookup"] = self.lookup
        return found
