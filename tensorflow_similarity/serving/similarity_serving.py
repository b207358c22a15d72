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
    of this package. Both signatures check their images in the graph before
    the network runs: another shape than `[batch, *input_shape]` (another
    size, channel count or rank), or a NaN or infinite pixel, is refused
    with an `InvalidArgumentError` that names the expected shape (a loaded
    signature would otherwise answer an image of another size); `lookup`
    also refuses non-finite embeddings, as `model.lookup` does. An empty
    batch returns empty outputs.

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
        dtype = tf.uint8 if uint8_input else tf.float32
        spec = tf.TensorSpec([None, *input_shape], dtype, name="images")
        normalise = isinstance(distance, CosineDistance)

        def raw_embeddings(images: tf.Tensor, signature: str) -> tf.Tensor:
            images = _checked_images(images, input_shape, dtype, signature)
            if uint8_input:
                images = tf.cast(images, tf.float32) / 255.0
            # An empty batch gets one blank image, whose embedding is dropped: some kernels
            # (oneDNN's batch norm, XNNPack) fail on a batch of none.
            count = tf.shape(images)[0]
            blank = tf.zeros(tf.concat([[tf.maximum(1 - count, 0)], tf.shape(images)[1:]], 0))
            return tf.cast(embeddings(tf.concat([images, blank], 0))[:count], tf.float32)

        def embed(images: tf.Tensor) -> dict[str, tf.Tensor]:
            found = raw_embeddings(images, "embed")
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
                queries = tf.debugging.assert_all_finite(
                    raw_embeddings(images, "lookup"),
                    "lookup: the model's embeddings of these images are not finite (NaN or "
                    "infinite); an index only holds finite embeddings",
                )
                distances, positions = exact_nearest(
                    index.distance,
                    queries,
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


def _checked_images(
    images: tf.Tensor, input_shape: Sequence[int | None], dtype: tf.DType, signature: str
) -> tf.Tensor:
    """`images`, once the graph has checked them: refused with a clear error, not misread.

    A loaded signature does not hold a caller to its declared spec: it runs
    an image of another size through the network (a pooled network answers
    it), and another rank or channel count fails deep in the graph, or
    aborts the process. So the graph asserts, before the network runs, that
    `images` is `[batch, *input_shape]` and, for floats, finite; the error
    names the expected shape and what was given.

    Args:
        images: The signature's input.
        input_shape: The shape of one image; a `None` dimension takes any size.
        dtype: The signature's dtype; a float one is checked to be finite.
        signature: The signature's name, for the message.

    Returns:
        `images`, with the checks as control dependencies.
    """
    expected = [-1 if size is None else int(size) for size in input_shape]
    shape = tf.shape(images)
    # Padded, so that an image of a lower rank compares (and fails) rather than erroring.
    dims = tf.concat([shape, tf.zeros([len(expected) + 1], tf.int32)], 0)[1 : len(expected) + 1]
    same = tf.logical_and(
        tf.equal(tf.rank(images), len(expected) + 1),
        tf.reduce_all(tf.logical_or(tf.equal(dims, expected), tf.equal(expected, -1))),
    )
    wanted = ", ".join("any" if size < 0 else str(size) for size in expected)
    checks = [
        tf.debugging.Assert(
            same,
            [
                f"{signature} takes images of shape [batch, {wanted}] ({dtype.name}); "
                "resize them to that size first. Got a batch of shape",
                shape,
            ],
            summarize=len(expected) + 1,
        )
    ]
    with tf.control_dependencies(checks):
        images = tf.identity(images)
    if dtype.is_floating:
        images = tf.debugging.assert_all_finite(
            images, f"{signature}: images hold NaN or infinite pixels; give finite pixels"
        )
    return images
