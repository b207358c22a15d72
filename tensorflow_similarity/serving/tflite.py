"""`convert_to_tflite`: one signature of an exported SavedModel as a TensorFlow Lite model."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf


def convert_to_tflite(saved_model: str | Path, signature: str = "embed") -> bytes:
    """Returns the TensorFlow Lite flatbuffer of one signature of an exported SavedModel.

    Converted with TensorFlow Lite's built-in operators only (no Flex
    delegate), so `tf.lite.Interpreter` (or the LiteRT runtime on a device)
    runs it alone: `interpreter.get_signature_runner(signature)(images=...)`
    returns the signature's outputs by name.

    Args:
        saved_model: The folder `export_model` wrote.
        signature: `"embed"` or `"lookup"`. Defaults to `"embed"`.

    Returns:
        The `.tflite` file's bytes.

    Raises:
        ValueError: If the SavedModel has no such signature.
    """
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(saved_model), signature_keys=[signature]
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()
