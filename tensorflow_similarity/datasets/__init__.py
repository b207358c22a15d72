"""Labelled image sets that ship with the package's dependencies (no download)."""

from tensorflow_similarity.datasets.glyphs import Glyphs, load_glyphs

__all__ = ["Glyphs", "load_glyphs"]
