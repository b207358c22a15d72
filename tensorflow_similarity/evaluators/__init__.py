"""Evaluators: the arithmetic behind an index's evaluation and calibration."""

from tensorflow_similarity.evaluators.evaluator import Evaluator
from tensorflow_similarity.evaluators.memory_evaluator import MemoryEvaluator

__all__ = ["Evaluator", "MemoryEvaluator"]
