"""A model's index API is one class, `IndexMixin`, in `models/index/`; old paths still import."""

from __future__ import annotations

import inspect

import pytest

from tensorflow_similarity.models import ContrastiveModel, SimilarityModel, index
from tensorflow_similarity.models.index import IndexMixin

VERBS = [
    "create_index",
    "index",
    "index_single",
    "upsert_index",
    "remove_from_index",
    "compact_index",
    "reset_index",
    "lookup",
    "single_lookup",
    "index_size",
    "index_summary",
    "to_data_frame",
    "evaluate_retrieval",
    "calibrate",
    "match",
    "evaluate_classification",
    "save_index",
    "load_index",
    "save",
    "export_serving",
]


def test_index_mixin_is_one_class_that_both_models_mix_in():
    assert IndexMixin.__mro__ == (IndexMixin, object)
    assert issubclass(SimilarityModel, IndexMixin) and issubclass(ContrastiveModel, IndexMixin)
    for verb in VERBS:
        assert verb in vars(IndexMixin), verb
        assert getattr(SimilarityModel, verb) is vars(IndexMixin)[verb], verb


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_is_documented_where_the_class_binds_it(verb):
    function = vars(IndexMixin)[verb]
    assert inspect.getdoc(function), verb
    assert next(iter(inspect.signature(function).parameters)) == "self"


def test_the_old_module_paths_still_import_the_same_objects():
    from tensorflow_similarity.models import index_fingerprint, index_mixin

    assert index_mixin.IndexMixin is IndexMixin
    assert index_mixin.index_path is index.index_path
    assert index_mixin.canonical_distance is index.canonical_distance
    assert index_fingerprint.StaleIndexError is index.StaleIndexError
    assert index_fingerprint.StaleIndexWarning is index.StaleIndexWarning
    assert index_fingerprint.weights_sha256 is index.fingerprint.weights_sha256
