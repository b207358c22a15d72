"""The serving tests share one trained glyphs model and its export (`glyphs_export`)."""

from __future__ import annotations

import pytest

from tests.serving.glyphs_export import Trained, train_and_export


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    return train_and_export(tmp_path_factory.mktemp("serving"))
