"""`TFLiteSignature`: a signature of an exported `.tflite` file, run with its images checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

try:  # LiteRT, TensorFlow Lite's successor, where it is installed: the same interpreter API.
    from ai_edge_litert.interpreter import Interpreter
except ImportError:
    Interpreter = tf.lite.Interpreter


class TFLiteSignature:
    """One signature of `embed.tflite` or `lookup.tflite`, run after checking its images.

    TensorFlow Lite has no assertion operator, so the converter drops the
    checks the SavedModel's signatures make in the graph, and an
    interpreter's signature runner resizes its input to whatever it is
    given: a model exported at 8x8 reads a 16x16 image as something else,
    and a NaN pixel returns neighbours at NaN distances. This class makes
    those checks in Python before it invokes the interpreter: the images
    must be `[batch, *input_shape]` of the file's declared input (its
    `shape_signature`) and dtype, and float pixels finite; anything else is
    a `ValueError` that says what was expected. An empty batch returns
    empty outputs (`[0, ...]`, each output's dtype) without invoking it. A
    device running the bare interpreter must make the same checks.

    Args:
        path: A `.tflite` file `export_model(..., tflite=True)` or
            `convert_to_tflite` wrote.
        signature: The signature to run. Defaults to the file's only one.

    Raises:
        ValueError: If the file has no such signature, or several and none
            is named.

    Example:

    ```python
    lookup = TFLiteSignature("served/lookup.tflite")
    found = lookup(images)  # {"ids": ..., "distances": ..., "labels": ..., "label_names": ...}
    ```
    """

    def __init__(self, path: str | Path, signature: str | None = None) -> None:
        self.path = Path(path)
        self._interpreter = Interpreter(model_path=str(self.path))
        names = list(self._interpreter.get_signature_list())
        if signature is None and len(names) == 1:
            signature = names[0]
        if signature not in names:
            raise ValueError(
                f"{str(self.path)!r} has the signatures {names}; got signature={signature!r}. "
                "Name one of them."
            )
        self.signature = signature
        self._runner = self._interpreter.get_signature_runner(signature)
        inputs = self._runner.get_input_details()
        if len(inputs) != 1:
            raise ValueError(
                f"{str(self.path)!r} signature {signature!r} takes {len(inputs)} inputs; an "
                "export's signatures take one, `images`."
            )
        ((self._input_name, details),) = inputs.items()
        self.input_shape = tuple(
            None if size < 0 else int(size) for size in details["shape_signature"][1:]
        )
        self.dtype = np.dtype(details["dtype"])
        self._outputs = self._runner.get_output_details()

    def __call__(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """Checks `images` and returns the signature's outputs by name.

        Args:
            images: `[batch, *input_shape]` images of the file's dtype.

        Returns:
            Each output of the signature, `[batch, ...]`.

        Raises:
            ValueError: If `images` have another shape or dtype, or a NaN
                or infinite pixel; the interpreter is not invoked.
        """
        images = np.asarray(images)
        wanted = ", ".join("any" if size is None else str(size) for size in self.input_shape)
        expected = f"[batch, {wanted}] {self.dtype.name}"
        same = images.ndim == len(self.input_shape) + 1 and all(
            size is None or size == given
            for size, given in zip(self.input_shape, images.shape[1:], strict=False)
        )
        if not same:
            raise ValueError(
                f"{self.path.name} ({self.signature}) takes images of shape {expected}; got "
                f"{list(images.shape)}. Resize them to that size first."
            )
        if images.dtype != self.dtype:
            raise ValueError(
                f"{self.path.name} ({self.signature}) takes {expected} images; got "
                f"{images.dtype.name}. Convert them (images.astype(np.{self.dtype.name}))."
            )
        if images.dtype.kind == "f" and not np.isfinite(images).all():
            bad = int(np.count_nonzero(~np.isfinite(images)))
            raise ValueError(
                f"{self.path.name} ({self.signature}): the images hold {bad} NaN or infinite "
                "pixels; give finite pixels."
            )
        if len(images) == 0:
            # XNNPack fails on a batch of none; strings come back as objects, as it returns them.
            return {
                name: np.zeros(
                    [0, *(max(int(size), 0) for size in details["shape_signature"][1:])],
                    object if np.dtype(details["dtype"]).kind in "SU" else details["dtype"],
                )
                for name, details in self._outputs.items()
            }
        return self._runner(**{self._input_name: images})
