"""Matchers: derive one label and distance per query from its neighbours, count matches.

0.17's `MatchNearest` and `MatchMajorityVote`; `make_classification_matcher`
resolves their names.
"""

from __future__ import annotations

from tensorflow_similarity.matchers.classification_match import ClassificationMatch
from tensorflow_similarity.matchers.match_majority_vote import MatchMajorityVote
from tensorflow_similarity.matchers.match_nearest import MatchNearest
from tensorflow_similarity.matchers.registry import MATCHER_NAMES, make_classification_matcher

__all__ = [
    "MATCHER_NAMES",
    "ClassificationMatch",
    "MatchMajorityVote",
    "MatchNearest",
    "make_classification_matcher",
]
