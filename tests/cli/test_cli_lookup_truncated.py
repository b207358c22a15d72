"""`tfsim lookup` says a cut-short model.keras is truncated, not "File not found"."""

from __future__ import annotations

import keras
import pytest

from tensorflow_similarity.cli import lookup
from tensorflow_similarity.cli.errors import UsageError


def test_a_truncated_model_file_is_named_truncated(tmp_path):
    inputs = keras.Input((2,))
    file = tmp_path / "model.keras"
    keras.Model(inputs, keras.layers.Dense(2)(inputs)).save(file)
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(UsageError, match="truncated or corrupt"):
        lookup.load_run_model(file, safe_mode=True)
