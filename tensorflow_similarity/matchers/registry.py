"""Matchers by name, as `calibrate(matcher="match_nearest")` takes them."""

from __future__ import annotations

from tensorflow_similarity.matchers.classification_match import ClassificationMatch
from tensorflow_similarity.matchers.match_majority_vote import MatchMajorityVote
from tensorflow_similarity.matchers.match_nearest import MatchNearest

MATCHER_NAMES: dict[str, type[ClassificationMatch]] = {
    "match_nearest": MatchNearest,
    "match_majority_vote": MatchMajorityVote,
}


def make_classification_matcher(matcher: ClassificationMatch | str) -> ClassificationMatch:
    """Returns the matcher named `matcher` (`"match_nearest"`, `"match_majority_vote"`) or itself.

    Raises:
        ValueError: If the name is unknown.
    """
    if isinstance(matcher, str):
        key = matcher.strip().lower()
        if key not in MATCHER_NAMES:
            raise ValueError(
                f"Unknown matcher {matcher!r}. Pass a ClassificationMatch or one of "
                f"{sorted(MATCHER_NAMES)}."
            )
        return MATCHER_NAMES[key]()
    if not isinstance(matcher, ClassificationMatch):
        raise ValueError(
            f"Expected a ClassificationMatch or its name; got {type(matcher).__name__}."
        )
    return matcher
