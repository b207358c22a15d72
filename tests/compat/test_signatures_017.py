"""Every public signature of tensorflow-similarity 0.17.1, checked against ours.

`signatures_017.json` is written by `tools/compat017/extract_signatures.py`
from 0.17.1's source (commit 6b67e0a): each public class, function and method
of its public modules, with its parameters' names, kinds and defaults. For
every entry, our object must exist at 0.17's module path or in a package
above it, take 0.17's positional parameters at the same positions, accept
each of 0.17's parameters by name, and keep its defaults; ours may add
parameters with defaults, after 0.17's or keyword-only (see
`signature_check`). A deviation is allowed only when `ALLOWED` lists it with
a one-line reason: the section of the migration guide (docs/migrating.md) "Migrating from
tensorflow-similarity 0.17" that states the difference, or the loud list of
issue 27 (names and arguments that are missing, so a 0.17 call fails with an
error instead of doing something else).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tests.compat.signature_check import (
    compare,
    deviations,
    entry_id,
    load_entries,
)

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"

ENTRIES = load_entries()
BY_ID = {entry_id(entry): entry for entry in ENTRIES}

# Reasons point to a section of the migration guide, docs/migrating.md ("guide § <heading>"), or
# to the loud list of issue 27 (missing names and arguments: a 0.17 call raises).
LOUD = "loud: see issue 27 loud list"
MISSING = "missing: see issue 27 loud list"
SEARCH = "guide § Similarity models and search"
SIGNATURES = "guide § Signatures"
ARCHITECTURES = "guide § Architectures"
LOSSES = "guide § Losses"

ALLOWED: dict[str, dict[str, str]] = {
    "tensorflow_similarity.architectures.efficientnet.EfficientNetSim": {
        "default:weights": f"{ARCHITECTURES}: weights=None, no download by default",
        "default:trainable": f"{ARCHITECTURES}: trainable='full', so sync_bn has an effect",
    },
    "tensorflow_similarity.architectures.resnet50.ResNet50Sim": {
        "default:weights": f"{ARCHITECTURES}: weights=None, no download by default",
        "default:trainable": f"{ARCHITECTURES}: trainable='full', so sync_bn has an effect",
    },
    "tensorflow_similarity.classification_metrics.classification_metric.ClassificationMetric": {
        "default:name": f"{SIGNATURES}: a base class's None takes the class's default",
        "default:canonical_name": f"{SIGNATURES}: a base class's None takes the class's default",
        "default:maximize": f"{SIGNATURES}: None takes default_maximize, True as in 0.17",
        "default:increasing": f"{SIGNATURES}: None takes default_increasing, True as in 0.17",
    },
    "tensorflow_similarity.indexer.Indexer": {
        "default:search": f"{SEARCH}: the exact 'linear' search replaces nmslib",
    },
    "tensorflow_similarity.losses.barlow.Barlow": {
        "default:margin": f"{LOSSES}: Barlow Twins' margin defaults to 0.0",
        "default:name": f"{SIGNATURES}: a loss 0.17 left unnamed is named after its class",
        "**kwargs": LOUD,
    },
    "tensorflow_similarity.losses.circle_loss.CircleLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.multinegrank_loss.MultiNegativesRankLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.multisim_loss.MultiSimilarityLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.pn_loss.PNLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.simclr.SimCLRLoss": {
        "default:temperature": f"{LOSSES}: the paper's temperature 0.1 (0.17: 0.05)",
        "**kwargs": LOUD,
    },
    "tensorflow_similarity.losses.simsiam.SimSiamLoss": {
        "default:margin": f"{LOSSES}: SimSiam's margin defaults to 0.0",
        "default:name": f"{SIGNATURES}: a loss 0.17 left unnamed is named after its class",
        "**kwargs": LOUD,
    },
    "tensorflow_similarity.losses.softnn_loss.SoftNearestNeighborLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.triplet_loss.TripletLoss": {"**kwargs": LOUD},
    "tensorflow_similarity.losses.vicreg.VicReg": {
        "default:reduction": f"{LOSSES}: VICReg's loss is a scalar (0.17: reduction NONE)",
        "default:name": f"{SIGNATURES}: a loss 0.17 left unnamed is named after its class",
        "**kwargs": LOUD,
    },
    "tensorflow_similarity.losses.xbm_loss.XBM": {"**kwargs": LOUD},
    "tensorflow_similarity.matchers.classification_match.ClassificationMatch": {
        "default:name": f"{SIGNATURES}: a base class's None takes the class's default",
        "default:canonical_name": f"{SIGNATURES}: a base class's None takes the class's default",
    },
    "tensorflow_similarity.matchers.match_majority_vote.MatchMajorityVote": {"**kwargs": LOUD},
    "tensorflow_similarity.matchers.match_nearest.MatchNearest": {"**kwargs": LOUD},
    "tensorflow_similarity.models.contrastive_model.create_contrastive_model": {
        "*args": LOUD,
        "**kwargs": LOUD,
    },
    "tensorflow_similarity.models.contrastive_model.ContrastiveModel": {"*args": LOUD},
    "tensorflow_similarity.models.contrastive_model.ContrastiveModel.compile": {
        "default:search": f"{SEARCH}: the exact 'linear' search replaces nmslib",
    },
    "tensorflow_similarity.models.contrastive_model.ContrastiveModel.create_index": {
        "default:search": f"{SEARCH}: the exact 'linear' search replaces nmslib",
    },
    "tensorflow_similarity.models.contrastive_model.ContrastiveModel.calibrate": {
        "default:thresholds_targets": f"{SIGNATURES}: a mutable default {{}} written None",
    },
    "tensorflow_similarity.models.similarity_model.SimilarityModel": {"*args": LOUD},
    "tensorflow_similarity.models.similarity_model.SimilarityModel.compile": {
        "default:search": f"{SEARCH}: the exact 'linear' search replaces nmslib",
    },
    "tensorflow_similarity.models.similarity_model.SimilarityModel.create_index": {
        "default:search": f"{SEARCH}: the exact 'linear' search replaces nmslib",
    },
    "tensorflow_similarity.retrieval_metrics.bndcg.BNDCG": {"**kwargs": LOUD},
    "tensorflow_similarity.retrieval_metrics.bndcg.BNDCG.compute": {"**kwargs": LOUD},
    "tensorflow_similarity.retrieval_metrics.precision_at_k.PrecisionAtK.compute": {
        "**kwargs": LOUD
    },
    "tensorflow_similarity.retrieval_metrics.recall_at_k.RecallAtK": {"**kwargs": LOUD},
    "tensorflow_similarity.retrieval_metrics.recall_at_k.RecallAtK.compute": {"**kwargs": LOUD},
    "tensorflow_similarity.retrieval_metrics.retrieval_metric.RetrievalMetric": {
        "default:name": f"{SIGNATURES}: a base class's None takes the class's default",
        "default:canonical_name": f"{SIGNATURES}: a base class's None takes the class's default",
    },
    **{
        f"tensorflow_similarity.search.nmslib_search.NMSLibSearch{member}": {
            "missing": f"{SEARCH}: nmslib is gone (no Python 3.10+ build)"
        }
        for member in (
            "",
            ".add",
            ".batch_add",
            ".lookup",
            ".batch_lookup",
            ".save",
            ".load",
            ".get_config",
        )
    },
    "tensorflow_similarity.search.search.Search": {"**kwargs": LOUD},
    "tensorflow_similarity.search.search.Search.add": {
        "default:verbose": f"{SEARCH}: verbose=None, the search's own (0.17: 1)",
    },
    "tensorflow_similarity.search.search.Search.batch_add": {
        "default:verbose": f"{SEARCH}: verbose=None, the search's own (0.17: 1)",
    },
    "tensorflow_similarity.search.utils.make_search": {
        "param:config": LOUD,
        "required:search": LOUD,
        "required:distance": LOUD,
        "required:dim": LOUD,
    },
    "tensorflow_similarity.visualization.projector.projector": {
        "default:densmap": f"{SEARCH}: None is 0.17's True for UMAP (the projector is PCA)",
    },
}


def test_the_table_is_017s_public_api():
    assert len(ENTRIES) == len(BY_ID) >= 300
    xbm = BY_ID["tensorflow_similarity.losses.xbm_loss.XBM"]["parameters"]
    assert [p["name"] for p in xbm] == [
        "loss",
        "memory_size",
        "warmup_steps",
        "reduction",
        "name",
        "kwargs",
    ]
    search = BY_ID["tensorflow_similarity.search.search.Search"]["parameters"]
    assert [p["name"] for p in search][:4] == ["distance", "dim", "verbose", "name"]
    compile_017 = BY_ID["tensorflow_similarity.models.similarity_model.SimilarityModel.compile"]
    auto = next(p for p in compile_017["parameters"] if p["name"] == "distance")
    assert auto["default"] == {"literal": True, "repr": "'auto'"}


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_id)
def test_signature_is_017s(entry):
    allowed = ALLOWED.get(entry_id(entry), {})
    unexpected = [d for d in deviations(entry) if d not in allowed]
    assert not unexpected, (
        f"{entry_id(entry)} differs from 0.17.1: {unexpected}. Restore 0.17's signature, or "
        "document the difference in the migration guide (docs/migrating.md) and list it in ALLOWED."
    )


def test_every_allowed_deviation_still_exists():
    stale = {}
    for name, allowed in ALLOWED.items():
        assert name in BY_ID, f"ALLOWED names {name}, which is not in 0.17's table"
        gone = sorted(set(allowed) - set(deviations(BY_ID[name])))
        if gone:
            stale[name] = gone
    assert not stale, (
        f"Fixed, so remove from ALLOWED (and the migration guide if it says so): {stale}"
    )


def test_every_reason_points_to_the_guide_or_the_loud_list():
    headings = set(re.findall(r"^## (.+)$", GUIDE.read_text(), flags=re.MULTILINE))
    for name, allowed in ALLOWED.items():
        for deviation, reason in allowed.items():
            assert "\n" not in reason and reason, (name, deviation)
            if reason in (LOUD, MISSING):
                continue
            section = re.match(r"guide § ([^:]+):", reason)
            assert section and section.group(1) in headings, (name, deviation, reason)


def _recorded(function):
    """A function's parameters as the table records them (literal defaults only)."""
    records = []
    for parameter in inspect.signature(function).parameters.values():
        default = None
        if parameter.default is not parameter.empty:
            default = {"literal": True, "repr": repr(parameter.default)}
        records.append({"name": parameter.name, "kind": parameter.kind.name, "default": default})
    return records


def test_reordered_renamed_and_changed_signatures_are_caught():
    def theirs(loss, memory_size, warmup_steps=0, reduction="auto", name=None, **kwargs):
        pass

    def reordered(loss, memory_size, warmup_steps=0, name=None, reduction="auto", **kwargs):
        pass

    def keyword_only(loss, memory_size, *, warmup_steps=0, reduction="auto", name=None, **kw):
        pass

    def changed(loss, memory_size, warmup_steps=1, reduction="auto", name=None, **kwargs):
        pass

    def renamed(loss, size, warmup_steps=0, reduction="auto", name=None):
        pass

    def extended(loss, memory_size, warmup_steps=0, reduction="auto", name=None, dtype=None, *, x):
        pass

    def check(ours):
        return compare(_recorded(theirs), list(inspect.signature(ours).parameters.values()))

    assert check(theirs) == []
    assert check(reordered) == ["position:reduction", "position:name"]
    assert check(keyword_only) == [
        "position:warmup_steps",
        "position:reduction",
        "position:name",
    ]
    assert check(changed) == ["default:warmup_steps"]
    assert check(renamed) == ["param:memory_size", "**kwargs", "required:size"]
    assert check(extended) == ["**kwargs", "required:x"]
