"""The index API of a model whose embeddings are its backbone's representations."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.models.index import IndexMixin
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store

__all__ = ["BackboneIndexMixin"]


class BackboneIndexMixin(IndexMixin):
    """`IndexMixin` for a model that indexes its `backbone`'s output, with 0.17's signatures.

    `ContrastiveModel` mixes it in: `predict` and `embed` return the
    backbone's representations (or, with `embed(output="projector")`, the
    projector's), and those are what the index holds. The model has
    `backbone` and `projector` attributes.
    """

    def create_index(
        self,
        distance: Distance | str = "cosine",
        search: Search | str = "linear",
        kv_store: Store | str = "memory",
        evaluator: Evaluator | str = "memory",
        stat_buffer_size: int = 1000,
        *,
        embedding_output: int | None = None,
    ) -> None:
        """Creates the (empty) index of the backbone's representations, in 0.17's order.

        Args:
            distance: A `Distance` or its name. Defaults to `"cosine"`.
            search: `"linear"` or a `Search` instance. Defaults to `"linear"`.
            kv_store: `"memory"` or a `Store` instance. Defaults to `"memory"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            stat_buffer_size: Lookup timings kept for `index_summary`.
                Defaults to 1000.
            embedding_output: Must be `None`: the backbone has one output.

        Raises:
            ValueError: For an unknown component, or a backbone whose output
                is not `[batch, dim]`.
        """
        super().create_index(
            distance=distance,
            search=search,
            kv_store=kv_store,
            evaluator=evaluator,
            embedding_output=embedding_output,
            stat_buffer_size=stat_buffer_size,
        )

    def predict(
        self,
        x: Any,
        batch_size: int | None = None,
        verbose: int | str = 0,
        steps: int | None = None,
        callbacks: Any = None,
        max_queue_size: int = 10,
        workers: int = 1,
        use_multiprocessing: bool = False,
    ) -> Any:
        """The backbone's representations of `x` (`keras.Model.predict`), silent by default.

        Returns what `call` returns, the backbone's output (0.17 returned the
        L2-normalised projector output: `embed(x, output="projector")`).

        Args:
            x: Images (array, tensor or dataset).
            batch_size: As for `keras.Model.predict`.
            verbose: As for `keras.Model.predict`. Defaults to 0, as in 0.17.
            steps: As for `keras.Model.predict`.
            callbacks: As for `keras.Model.predict`.
            max_queue_size: Accepted for 0.17's signature; Keras 3 takes the
                loading settings on a `keras.utils.PyDataset`.
            workers: Likewise.
            use_multiprocessing: Likewise.
        """
        del max_queue_size, workers, use_multiprocessing
        return super().predict(
            x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )

    def embed(self, images, output: str = "backbone", batch_size: int = 256):
        """Returns NumPy embeddings of `images`.

        Args:
            images: Array or dataset of images.
            output: `"backbone"` (representations) or `"projector"` (projections).
            batch_size: Batch size for array inputs. Defaults to 256.

        Returns:
            A NumPy array of embeddings.

        Raises:
            ValueError: For an unknown `output`.
        """
        if output == "backbone":
            return self.backbone.predict(images, batch_size=batch_size, verbose=0)
        if output == "projector":
            encoder = keras.Sequential([self.backbone, self.projector])
            return encoder.predict(images, batch_size=batch_size, verbose=0)
        raise ValueError(f"output must be 'backbone' or 'projector', got {output!r}.")

    def _index_embeddings(self, x):
        return self.embed(x, batch_size=self.index_batch_size)

    def _index_embedding_size(self, embedding_output: int | None) -> int:
        if embedding_output is not None:
            raise ValueError(
                "A ContrastiveModel indexes its backbone's single output; pass "
                "embedding_output=None."
            )
        shape = self.backbone.outputs[0].shape
        if len(shape) != 2 or shape[-1] is None:
            raise ValueError(
                f"The backbone's output has shape {shape}; an index needs [batch, dim] "
                "representations. Use a backbone with pooling."
            )
        return int(shape[-1])

    def _index_weights(self) -> list:
        # The index holds the backbone's representations: the projector's weights do not
        # make them, so training only the projector leaves the index fresh.
        return list(self.backbone.weights)

    def _index_input_shape(self) -> tuple[int | None, ...] | None:
        return tuple(self.backbone.inputs[0].shape[1:]) if self.backbone.inputs else None

    def _serving_embeddings(self, images):
        return self.backbone(images, training=False)
