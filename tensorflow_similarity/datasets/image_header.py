"""An image file's width and height read from its header, to refuse decompression bombs.

A PNG of a few kilobytes can declare 12,000 x 12,000 pixels, which decoding
to float32 RGB turns into gigabytes. As Pillow's `Image.MAX_IMAGE_PIXELS`
guard does, the header is read first (a few bytes; a JPEG's segments are
skipped by their lengths) and an image of more pixels than a limit is refused
before anything is decoded. The formats are those `tf.io.decode_image`
reads: PNG, JPEG, GIF (its canvas, which every frame is decoded to) and BMP,
recognised by their content, not their names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

# Pillow's default `Image.MAX_IMAGE_PIXELS`: 1024 * 1024 * 1024 // 4 // 3.
MAX_IMAGE_PIXELS = 89_478_485
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (the ones that carry the image size); C4, C8 and CC are not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_dimensions(path: Path | str) -> tuple[int, int] | None:
    """The `(width, height)` an image file's header declares, without decoding it.

    Args:
        path: An image file.

    Returns:
        The width and height, or `None` for a file that is not a PNG, JPEG,
        GIF or BMP, or whose header is cut short (decoding it then says what
        is wrong).

    Raises:
        OSError: If the file cannot be read.
    """
    with open(path, "rb") as file:
        start = file.read(26)
        if start.startswith(_PNG_SIGNATURE) and start[12:16] == b"IHDR" and len(start) >= 24:
            return int.from_bytes(start[16:20], "big"), int.from_bytes(start[20:24], "big")
        if start[:6] in (b"GIF87a", b"GIF89a") and len(start) >= 10:
            return int.from_bytes(start[6:8], "little"), int.from_bytes(start[8:10], "little")
        if start[:2] == b"BM" and len(start) >= 26:
            if int.from_bytes(start[14:18], "little") == 12:  # OS/2 BITMAPCOREHEADER
                width, height = start[18:20], start[20:22]
                return int.from_bytes(width, "little"), int.from_bytes(height, "little")
            width = int.from_bytes(start[18:22], "little", signed=True)
            height = int.from_bytes(start[22:26], "little", signed=True)  # < 0: top-down rows
            return abs(width), abs(height)
        if start[:2] == b"\xff\xd8":
            file.seek(2)
            return _jpeg_dimensions(file)
    return None


def _jpeg_dimensions(file: BinaryIO) -> tuple[int, int] | None:
    """The size in the first start-of-frame segment of a JPEG read from just after its SOI."""
    while True:
        if file.read(1) != b"\xff":
            return None
        marker = file.read(1)
        while marker == b"\xff":  # fill bytes
            marker = file.read(1)
        if not marker or marker[0] in (0xD9, 0xDA):  # end of image, or scan data before a frame
            return None
        if marker[0] == 0x01 or 0xD0 <= marker[0] <= 0xD7:  # markers without a length
            continue
        length = file.read(2)
        if len(length) < 2:
            return None
        if marker[0] in _JPEG_FRAMES:
            frame = file.read(5)  # precision, height, width
            if len(frame) < 5:
                return None
            return int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big")
        file.seek(int.from_bytes(length, "big") - 2, os.SEEK_CUR)


def check_image_pixels(
    path: Path | str, max_pixels: int | None = MAX_IMAGE_PIXELS, option: str = "max_pixels"
) -> None:
    """Refuses an image whose header declares more than `max_pixels` pixels, before decoding.

    Args:
        path: An image file.
        max_pixels: The most pixels (width times height) accepted, or `None`
            for no limit. Defaults to `MAX_IMAGE_PIXELS`, Pillow's default.
        option: How the caller's user raises the limit, for the message.

    Raises:
        ValueError: If the image has more pixels than `max_pixels`, naming
            the file, its size and the limit.
    """
    if max_pixels is None:
        return
    try:
        dimensions = image_dimensions(path)
    except OSError:
        return  # decoding reports the unreadable file
    if dimensions is None or dimensions[0] * dimensions[1] <= max_pixels:
        return
    width, height = dimensions
    # Decoded as float32 RGB, as read_image decodes.
    decoded_gb = width * height * 3 * 4 / 1e9
    raise ValueError(
        f"image {str(path)!r} is {width:,} x {height:,} pixels ({width * height:,}), more than "
        f"the limit of {max_pixels:,} (decoding it would take {decoded_gb:.1f} GB of memory); "
        "it was not decoded. Shrink the image, or, if you trust the file, raise the limit "
        f"with {option}."
    )
