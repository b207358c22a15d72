"""The TensorFlow Serving requests and responses of docs/guides/serving.md are the signatures'.

The page's first Python block exports its example model; each JSON request shown
(`<!-- rest: request -->`) is run through the exported signature it names, and the response
TensorFlow Serving's REST API would send (row format: `predictions`, one object per instance,
or the values alone for a signature with one output) must be the one shown after it.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.docs.markdown_blocks import DOCS, fenced_blocks, python_blocks

PAGE = DOCS / "guides" / "serving.md"


def rest_response(signature, request: dict) -> dict:
    """What TensorFlow Serving answers to a row-format `request` for `signature`."""
    ((name, spec),) = signature.structured_input_signature[1].items()
    outputs = signature(**{name: tf.constant(request["instances"], spec.dtype)})
    values = {
        key: [
            [v.decode() if isinstance(v, bytes) else v for v in row]
            if isinstance(row, list)
            else row
            for row in tensor.numpy().tolist()
        ]
        for key, tensor in outputs.items()
    }
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    count = len(request["instances"])
    return {"predictions": [{key: value[i] for key, value in values.items()} for i in range(count)]}


def shown_exchanges() -> list[tuple[dict, dict]]:
    text = PAGE.read_text(encoding="utf-8")
    shown = {"request": [], "response": []}
    for block in fenced_blocks(PAGE):
        if block.language != "json":
            continue
        before = text.splitlines()[: block.line - 1]
        marker = re.fullmatch(r"<!-- rest: (request|response) -->", before[-1].strip())
        assert marker, f"{block.where}: a JSON block without a rest marker"
        shown[marker.group(1)].append(json.loads(block.source))
    assert len(shown["request"]) == len(shown["response"]) >= 2
    return list(zip(shown["request"], shown["response"], strict=True))


def assert_same(found, shown, where: str) -> None:
    if isinstance(shown, dict):
        assert isinstance(found, dict) and set(found) == set(shown), where
        for key in shown:
            assert_same(found[key], shown[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(found, list) and len(found) == len(shown), where
        for i, (f, s) in enumerate(zip(found, shown, strict=True)):
            assert_same(f, s, f"{where}[{i}]")
    elif isinstance(shown, float):
        assert found == pytest.approx(shown, rel=1e-5, abs=1e-6), where
    else:
        assert found == shown and type(found) is type(shown), where


@pytest.fixture(scope="module")
def exported():
    namespace: dict = {}
    exec(python_blocks(PAGE)[0].source, namespace)  # the page's own export
    return tf.saved_model.load(namespace["folder"])


def test_the_pages_requests_get_the_responses_it_shows(exported):
    exchanges = shown_exchanges()
    assert {request["signature_name"] for request, _ in exchanges} == {"embed", "lookup"}
    for request, response in exchanges:
        signature = exported.signatures[request["signature_name"]]
        found = rest_response(signature, request)
        assert_same(found, response, request["signature_name"])
        outputs = signature.structured_outputs
        if len(outputs) > 1:
            assert set(response["predictions"][0]) == set(outputs)
            # Integers shown for the integer outputs, strings for the string ones.
            row = response["predictions"][0]
            for key, spec in outputs.items():
                kind = {tf.int64: int, tf.float32: float, tf.string: str}[spec.dtype]
                assert all(isinstance(v, kind) for v in row[key]), key


def test_the_pages_lookup_example_is_the_models():
    # The example's numbers, from its weights: a query e0 + e3 / 2 embeds to (1.5, 0.5, 0),
    # at cosine distance 1 - 1.5 / sqrt(2.5) from e0 and 1 - 2 / sqrt(5) from e0 + e1 (owl).
    (_, response), _ = shown_exchanges()
    distances = response["predictions"][0]["distances"]
    np.testing.assert_allclose(distances, [1 - 1.5 / 2.5**0.5, 1 - 2 / 5**0.5], rtol=1e-5)
