"""Image sizes read from headers against what TensorFlow decodes, and the pixel limit."""

from __future__ import annotations

import io

import pytest
import tensorflow as tf
from PIL import Image

from tensorflow_similarity.datasets import read_image
from tensorflow_similarity.datasets.image_header import (
    MAX_IMAGE_PIXELS,
    check_image_pixels,
    image_dimensions,
)


def _encoded(image_format: str, mode: str, size: tuple[int, int], **options) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, image_format, **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "image_format, mode, options",
    [
        ("PNG", "RGB", {}),
        ("PNG", "1", {}),
        ("JPEG", "RGB", {}),
        ("JPEG", "L", {"progressive": True}),
        ("JPEG", "RGB", {"exif": b"Exif\x00\x00" + b"\x00" * 5000}),  # a segment to skip
        ("GIF", "P", {}),
        ("BMP", "RGB", {}),
        ("BMP", "RGBA", {}),
    ],
)
def test_header_dimensions_are_those_tensorflow_decodes(tmp_path, image_format, mode, options):
    path = tmp_path / "image.any"  # recognised by content, not by name
    path.write_bytes(_encoded(image_format, mode, (37, 19), **options))
    decoded = tf.io.decode_image(path.read_bytes(), channels=3, expand_animations=False)
    assert image_dimensions(path) == (decoded.shape[1], decoded.shape[0]) == (37, 19)


@pytest.mark.parametrize("content", [b"", b"not an image", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"])
def test_a_header_cut_short_or_unknown_gives_none(tmp_path, content):
    path = tmp_path / "image.png"
    path.write_bytes(content)
    assert image_dimensions(path) is None
    check_image_pixels(path, 1)  # left to the decoder, which names what is wrong


def test_an_image_over_the_limit_is_refused_before_it_is_decoded(tmp_path, monkeypatch):
    path = tmp_path / "bomb.png"
    path.write_bytes(_encoded("PNG", "1", (12_000, 12_000)))  # a few kilobytes
    monkeypatch.setattr(tf.io, "decode_image", lambda *args, **kwargs: pytest.fail("decoded"))
    with pytest.raises(ValueError) as caught:
        read_image(path, 8)
    message = str(caught.value)
    assert str(path) in message and "12,000 x 12,000 pixels (144,000,000)" in message
    assert f"{MAX_IMAGE_PIXELS:,}" in message and "max_pixels" in message


def test_the_limit_is_inclusive_and_none_lifts_it(tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(_encoded("PNG", "RGB", (10, 10)))
    check_image_pixels(path, 100)
    with pytest.raises(ValueError, match="more than the limit of 99"):
        check_image_pixels(path, 99)
    assert read_image(path, 4, max_pixels=None).shape == (4, 4, 3)
