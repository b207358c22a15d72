"""Glyphs: characters of three scripts drawn with the fonts matplotlib ships.

Every image is one character drawn with one TrueType font of matplotlib's
own data folder (`matplotlib.get_data_path()`, `fonts/ttf`), so the set needs
no download and is the same on every machine with the same matplotlib and
Pillow. Latin letters and digits are the seen classes; Greek and Cyrillic
letters, a new script to a model trained on the Latin ones, are the unseen
classes (as Omniglot's evaluation alphabets are).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.metadata
import os
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

# Font files of matplotlib's fonts/ttf folder: DejaVu Sans, Serif and Sans Mono in four
# styles each, STIX General in four, six Computer Modern faces (Latin only).
FONT_FILES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
    "cmr10.ttf",
    "cmb10.ttf",
    "cmss10.ttf",
    "cmti10.ttf",
    "cmtt10.ttf",
    "cmmi10.ttf",
)

# The characters of each script, in label order: Latin (the seen classes) first.
SCRIPTS = {
    "latin": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    # Capitals without the unassigned U+03A2, then small letters with the final sigma.
    "greek": "".join(chr(c) for c in range(0x391, 0x3AA) if c != 0x3A2)
    + "".join(chr(c) for c in range(0x3B1, 0x3CA)),
    "cyrillic": "".join(chr(c) for c in range(0x410, 0x450)) + "\u0401\u0451",
}
SEEN_SCRIPTS = ("latin",)
# No two Latin characters look alike in most fonts (the nearest pair, E and F, differ in a
# ninth of their ink), so each is a class of its own: labels 0-61.
NUM_SEEN_CLASSES = len(SCRIPTS["latin"])

# Side of the images drawn once and cached; `load_glyphs` resizes them.
MASTER_SIZE = 64
# Two characters are one class when, in at least half of the fonts that draw both, their
# images (at 32x32) differ in less than this fraction of their ink: in the median font,
# look-alikes that share an outline (Latin A, Greek Alpha, Cyrillic A) differ by well under
# it, and the nearest distinct pair (Latin p, Greek rho) by well over it.
LOOK_ALIKE_INK_DIFFERENCE = 0.04
# Pillow's area-averaging resampling filter (Image.Resampling.BOX).
_BOX = 4
# Changes whenever what is drawn or how it is stored changes: part of the cache key.
_FORMAT_VERSION = 2


@dataclasses.dataclass
class Glyphs:
    """The glyphs set: one image per class and font.

    Attributes:
        images: `[n, size, size]` float32 images in `[0, 1]`: white ink on
            black, the glyph cropped to its ink, centred and scaled to fill
            the image less a margin of a sixteenth of its side on each side.
        labels: `[n]` int32 classes; the seen classes come first.
        fonts: The font file of each image, e.g. `"DejaVuSerif-Italic.ttf"`.
        class_names: The characters of each class, space-separated when
            look-alikes were merged (e.g. `"A Α А"`).
        class_scripts: The script of each class's first character:
            `"latin"`, `"greek"` or `"cyrillic"`.
        num_seen_classes: Classes `0 .. num_seen_classes - 1` are the Latin
            letters and digits; the others are Greek and Cyrillic letters.
    """

    images: np.ndarray
    labels: np.ndarray
    fonts: list[str]
    class_names: list[str]
    class_scripts: list[str]
    num_seen_classes: int

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.class_names)


def load_glyphs(image_size: int = 32, cache_dir: str | Path | None = None) -> Glyphs:
    """Returns the glyphs set: characters drawn with the fonts matplotlib ships.

    Each of the 22 fonts of `FONT_FILES` draws each character of `SCRIPTS`
    that its character map (read with fontTools) holds: 62 Latin letters
    and digits in all 22 fonts, 49 Greek and 66 Cyrillic letters in the 16
    DejaVu and STIX fonts, so no image is a "missing glyph" box. A character
    is drawn with Pillow, cropped to its ink, centred on a square and
    resized. Characters that look alike in most fonts (see
    `LOOK_ALIKE_INK_DIFFERENCE`: Latin A, Greek Alpha and Cyrillic A, or
    Latin p and Cyrillic er) are one class, named after all of them, with
    one image per font; where one font draws two classes alike (Greek kappa
    and Cyrillic ka in DejaVu Sans Mono), the later class has no image of
    that font. That leaves 62 seen classes (Latin letters and digits, labels
    0-61, 22 images each) and 81 unseen ones (Greek and Cyrillic letters, up
    to 16 images each), with matplotlib 3.11 and Pillow 13; a font is one
    example of a character, and augmentation makes more.

    The set is drawn once and cached as an `.npz` file named after a hash of
    what it depends on (matplotlib's, Pillow's, FreeType's and fontTools'
    versions, the font files' contents, this module's format), so later
    loads read the file; a cache that cannot be written is reported with a
    warning and the set is drawn each time.

    Args:
        image_size: Side of the square images, at least 8. Defaults to 32.
        cache_dir: Folder of the cache file. Defaults to Keras' dataset
            cache, `$KERAS_HOME/datasets` (`~/.keras/datasets`).

    Returns:
        A `Glyphs`.

    Raises:
        ImportError: If matplotlib (whose fonts are drawn), Pillow or
            fontTools is missing, naming the extra to install.
        ValueError: If `image_size` is not an integer of at least 8.

    Example:

    >>> from tensorflow_similarity.datasets import load_glyphs
    >>> glyphs = load_glyphs(image_size=16)
    >>> glyphs.images.shape, glyphs.num_seen_classes, glyphs.num_classes
    ((2626, 16, 16), 62, 143)
    >>> glyphs.class_names[10]
    'A Α А'
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int | np.integer):
        raise ValueError(f"image_size must be an integer of at least 8; got {image_size!r}.")
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8 pixels; got {image_size}.")
    modules = _drawing_modules()
    font_dir = Path(modules["matplotlib"].get_data_path()) / "fonts" / "ttf"
    missing = [name for name in FONT_FILES if not (font_dir / name).is_file()]
    if missing:
        raise ImportError(
            f"glyphs: matplotlib's font folder {str(font_dir)!r} lacks {', '.join(missing)}; "
            "reinstall matplotlib: pip install --force-reinstall matplotlib"
        )
    cache = _cache_file(cache_dir, font_dir, modules)
    master = _read_cache(cache)
    if master is None:
        master = _draw(font_dir, modules)
        _write_cache(cache, master)
    if int(master["num_seen_classes"]) != NUM_SEEN_CLASSES:
        raise ValueError(
            f"glyphs: this matplotlib's fonts draw {int(master['num_seen_classes'])} distinct "
            f"Latin classes, not {NUM_SEEN_CLASSES}: two Latin characters look alike. Report "
            "the matplotlib and Pillow versions to tensorflow-similarity."
        )
    return Glyphs(
        images=_resize(master["images"], image_size, modules["PIL.Image"]),
        labels=master["labels"].astype(np.int32),
        fonts=[str(f) for f in master["fonts"]],
        class_names=[str(c) for c in master["class_names"]],
        class_scripts=[str(s) for s in master["class_scripts"]],
        num_seen_classes=int(master["num_seen_classes"]),
    )


def _drawing_modules() -> dict[str, object]:
    modules = {}
    for name in ("matplotlib", "PIL.Image", "PIL.ImageDraw", "PIL.ImageFont", "fontTools.ttLib"):
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as error:
            raise ImportError(
                f"glyphs draws characters with the fonts matplotlib ships, and needs "
                f"matplotlib with its dependencies Pillow and fontTools ({error}). Install "
                "them with: pip install 'tensorflow-similarity[cli]' (or pip install "
                "matplotlib)."
            ) from error
    return modules


def _cache_file(cache_dir: str | Path | None, font_dir: Path, modules: dict) -> Path:
    if cache_dir is None:
        home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
        cache_dir = Path(home) / "datasets"
    digest = hashlib.sha256()
    features = importlib.import_module("PIL.features")
    for part in (
        str(_FORMAT_VERSION),
        importlib.metadata.version("matplotlib"),
        importlib.metadata.version("pillow"),
        str(features.version("freetype2")),
        importlib.metadata.version("fonttools"),
    ):
        digest.update(part.encode() + b"\0")
    for name in FONT_FILES:
        digest.update(name.encode() + b"\0" + (font_dir / name).read_bytes())
    return Path(cache_dir).expanduser() / f"tfsim_glyphs_{digest.hexdigest()[:16]}.npz"


def _read_cache(path: Path) -> dict[str, np.ndarray] | None:
    """The cached arrays, or `None` when there is no readable cache file."""
    keys = ("images", "labels", "fonts", "class_names", "class_scripts", "num_seen_classes")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: np.array(npz[key]) for key in keys}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):
        return None
    if arrays["images"].shape[1:] != (MASTER_SIZE, MASTER_SIZE):
        return None
    return arrays


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as handle:
            np.savez_compressed(handle, **arrays)
        os.replace(partial, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        warnings.warn(
            f"glyphs: cannot write the cache file {str(path)!r} ({error}); the glyphs are "
            "drawn again at each load. Pass a writable cache_dir (or set KERAS_HOME).",
            RuntimeWarning,
            stacklevel=3,
        )


def _draw(font_dir: Path, modules: dict) -> dict[str, np.ndarray]:
    """Draws every character of every font that maps it, and merges the look-alikes."""
    image_module, draw_module = modules["PIL.Image"], modules["PIL.ImageDraw"]
    font_module, tt_lib = modules["PIL.ImageFont"], modules["fontTools.ttLib"]
    characters = [c for script in SCRIPTS.values() for c in script]
    drawn: dict[tuple[str, str], np.ndarray] = {}
    for name in FONT_FILES:
        path = font_dir / name
        with tt_lib.TTFont(path, lazy=True) as font_file:
            mapped = font_file.getBestCmap()
        font = font_module.truetype(str(path), size=2 * MASTER_SIZE)
        for character in characters:
            if ord(character) not in mapped:
                continue
            canvas = image_module.new("L", (6 * MASTER_SIZE, 6 * MASTER_SIZE), 0)
            draw_module.Draw(canvas).text((MASTER_SIZE, MASTER_SIZE), character, 255, font=font)
            image = _crop_to_ink(np.asarray(canvas), image_module)
            if image is not None:  # a mapped character that draws no ink is not kept
                drawn[(name, character)] = image
    small = {key: _resize(image[None], 32, image_module)[0] for key, image in drawn.items()}
    groups = _look_alike_groups(small, characters)
    images, labels, fonts = [], [], []
    kept: dict[str, list[np.ndarray]] = {name: [] for name in FONT_FILES}
    for label, group in enumerate(groups):
        for name in FONT_FILES:
            first = next((c for c in group if (name, c) in drawn), None)
            # A font may draw two classes alike (Greek kappa and Cyrillic ka share an outline
            # in DejaVu Sans Mono): the later class gets no image of that font.
            if first is None or any(
                _ink_difference(small[(name, first)], other) < LOOK_ALIKE_INK_DIFFERENCE
                for other in kept[name]
            ):
                continue
            kept[name].append(small[(name, first)])
            images.append(drawn[(name, first)])
            labels.append(label)
            fonts.append(name)
    script_of = {c: script for script, chars in SCRIPTS.items() for c in chars}
    return {
        "images": np.stack(images),
        "labels": np.array(labels, np.int32),
        "fonts": np.array(fonts),
        "class_names": np.array([" ".join(group) for group in groups]),
        "class_scripts": np.array([script_of[group[0]] for group in groups]),
        "num_seen_classes": np.int64(sum(script_of[group[0]] in SEEN_SCRIPTS for group in groups)),
    }


def _crop_to_ink(canvas: np.ndarray, image_module) -> np.ndarray | None:
    """The glyph's ink, centred on a black square of side `MASTER_SIZE` with a margin."""
    rows, cols = np.nonzero(canvas)
    if len(rows) == 0:
        return None
    ink = canvas[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    height, width = ink.shape
    side = max(height, width)
    square = np.zeros((side, side), np.uint8)
    top, left = (side - height) // 2, (side - width) // 2
    square[top : top + height, left : left + width] = ink
    margin = MASTER_SIZE // 16
    inner = image_module.fromarray(square).resize((MASTER_SIZE - 2 * margin,) * 2, _BOX)
    image = np.zeros((MASTER_SIZE, MASTER_SIZE), np.uint8)
    image[margin:-margin, margin:-margin] = np.asarray(inner)
    return image


def _ink_difference(first: np.ndarray, second: np.ndarray) -> float:
    """The fraction of two images' ink that differs: 0 for equal images, 1 for disjoint ones."""
    return float(np.abs(first - second).sum() / (first.sum() + second.sum()))


def _look_alike_groups(
    small: dict[tuple[str, str], np.ndarray], characters: list[str]
) -> list[list[str]]:
    """The classes: groups of characters in label order, look-alikes together.

    `small` holds each drawn `(font, character)` at 32x32.
    """
    present = [c for c in characters if any((name, c) in small for name in FONT_FILES)]
    parent = {c: c for c in present}

    def root(c: str) -> str:
        while parent[c] != c:
            c = parent[c]
        return c

    for i, first in enumerate(present):
        for second in present[i + 1 :]:
            common = [n for n in FONT_FILES if (n, first) in small and (n, second) in small]
            if not common:
                continue
            differences = [_ink_difference(small[(n, first)], small[(n, second)]) for n in common]
            if np.median(differences) < LOOK_ALIKE_INK_DIFFERENCE:
                a, b = root(first), root(second)
                # The earlier character (Latin before Greek before Cyrillic) names the class.
                parent[max(a, b, key=present.index)] = min(a, b, key=present.index)
    groups: dict[str, list[str]] = {}
    for c in present:
        groups.setdefault(root(c), []).append(c)
    return list(groups.values())


def _resize(images: np.ndarray, size: int, image_module) -> np.ndarray:
    """`[n, s, s]` uint8 images as `[n, size, size]` float32 in `[0, 1]` (area averages)."""
    if images.shape[1] != size:
        images = np.stack(
            [
                np.asarray(image_module.fromarray(image).resize((size, size), _BOX))
                for image in images
            ]
        )
    return (images / 255.0).astype(np.float32)
