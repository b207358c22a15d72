"""Every module path of tensorflow-similarity 0.17.1 imports and holds 0.17's public names.

`KEPT_017_PATHS` lists, per module of 0.17.1's `tensorflow_similarity/`
tree (its commit 6b67e0a), the public names it defined or re-exported that
this package keeps; a 0.17 user's imports of them run unchanged. What is
gone on purpose is listed apart, so that a name disappearing or reappearing
fails a test.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

KEPT_017_PATHS = {
    "tensorflow_similarity": [
        "algebra",
        "architectures",
        "augmenters",
        "callbacks",
        "classification_metrics",
        "distances",
        "evaluators",
        "indexer",
        "layers",
        "losses",
        "matchers",
        "models",
        "retrieval_metrics",
        "samplers",
        "schedules",
        "search",
        "stores",
        "training_metrics",
        "types",
        "utils",
        "visualization",
    ],
    "tensorflow_similarity.algebra": ["build_masks", "masked_max", "masked_min"],
    "tensorflow_similarity.api": [
        "architectures",
        "augmenters",
        "callbacks",
        "classification_metrics",
        "distances",
        "evaluators",
        "indexer",
        "layers",
        "losses",
        "matchers",
        "models",
        "retrieval_metrics",
        "samplers",
        "search",
        "stores",
        "training_metrics",
        "utils",
        "visualization",
    ],
    "tensorflow_similarity.architectures": ["EfficientNetSim", "ResNet18Sim", "ResNet50Sim"],
    "tensorflow_similarity.architectures.efficientnet": [
        "EFF_ARCHITECTURE",
        "EFF_INPUT_SIZE",
        "EfficientNetSim",
        "build_effnet",
    ],
    "tensorflow_similarity.architectures.resnet18": [
        "ResNet18Sim",
        "block0",
        "build_resnet",
        "stack0",
        "stack_fn",
    ],
    "tensorflow_similarity.architectures.resnet50": ["ResNet50Sim", "build_resnet"],
    "tensorflow_similarity.architectures.utils": ["convert_sync_batchnorm"],
    "tensorflow_similarity.augmenters": [
        "Augmenter",
        "BarlowAugmenter",
        "ContrastiveAugmenter",
        "SimCLRAugmenter",
    ],
    "tensorflow_similarity.augmenters.augmentation_utils": [],
    "tensorflow_similarity.augmenters.augmentation_utils.blur": [
        "batch_random_blur",
        "gaussian_blur",
        "random_blur",
    ],
    "tensorflow_similarity.augmenters.augmentation_utils.color_jitter": [
        "color_jitter",
        "color_jitter_nonrand",
        "color_jitter_rand",
        "random_brightness",
        "random_color_jitter",
        "to_grayscale",
    ],
    "tensorflow_similarity.augmenters.augmentation_utils.cropping": [
        "center_crop",
        "crop_and_resize",
        "crop_random_resized_crop",
        "distorted_bounding_box_crop",
        "random_crop_with_resize",
        "random_resized_crop",
    ],
    "tensorflow_similarity.augmenters.augmentation_utils.flip": [
        "random_random_flip_left_right",
        "random_random_flip_top_bottom",
    ],
    "tensorflow_similarity.augmenters.augmentation_utils.random_apply": ["random_apply"],
    "tensorflow_similarity.augmenters.augmentation_utils.solarize": ["random_solarize"],
    "tensorflow_similarity.augmenters.augmenter": ["Augmenter"],
    "tensorflow_similarity.augmenters.barlow": ["BarlowAugmenter", "augment_barlow"],
    "tensorflow_similarity.augmenters.contrastive": ["ContrastiveAugmenter"],
    "tensorflow_similarity.augmenters.simclr": [
        "SimCLRAugmenter",
        "simclr_eval_augmentation",
        "simclr_training_augmentation",
    ],
    "tensorflow_similarity.callbacks": ["EvalCallback"],
    "tensorflow_similarity.classification_metrics": [
        "BinaryAccuracy",
        "ClassificationMetric",
        "F1Score",
        "FalsePositiveRate",
        "NegativePredictiveValue",
        "Precision",
        "Recall",
        "make_classification_metric",
    ],
    "tensorflow_similarity.classification_metrics.binary_accuracy": ["BinaryAccuracy"],
    "tensorflow_similarity.classification_metrics.classification_metric": ["ClassificationMetric"],
    "tensorflow_similarity.classification_metrics.f1_score": ["F1Score"],
    "tensorflow_similarity.classification_metrics.false_positive_rate": ["FalsePositiveRate"],
    "tensorflow_similarity.classification_metrics.negative_predictive_value": [
        "NegativePredictiveValue",
    ],
    "tensorflow_similarity.classification_metrics.precision": ["Precision"],
    "tensorflow_similarity.classification_metrics.recall": ["Recall"],
    "tensorflow_similarity.classification_metrics.utils": ["make_classification_metric"],
    "tensorflow_similarity.distances": [
        "CosineDistance",
        "DISTANCES",
        "Distance",
        "EuclideanDistance",
        "InnerProductSimilarity",
        "ManhattanDistance",
        "SNRDistance",
        "SquaredEuclideanDistance",
        "distance_canonicalizer",
    ],
    "tensorflow_similarity.evaluators": ["Evaluator", "MemoryEvaluator"],
    "tensorflow_similarity.evaluators.evaluator": ["Evaluator"],
    "tensorflow_similarity.evaluators.memory_evaluator": ["MemoryEvaluator"],
    "tensorflow_similarity.indexer": ["Indexer"],
    "tensorflow_similarity.layers": [
        "ActivationStdLoggingLayer",
        "GeneralizedMeanPooling",
        "GeneralizedMeanPooling1D",
        "GeneralizedMeanPooling2D",
        "MetricEmbedding",
    ],
    "tensorflow_similarity.losses": [
        "Barlow",
        "CircleLoss",
        "MetricLoss",
        "MultiNegativesRankLoss",
        "MultiSimilarityLoss",
        "PNLoss",
        "SimCLRLoss",
        "SimSiamLoss",
        "SoftNearestNeighborLoss",
        "TripletLoss",
        "VicReg",
        "XBM",
    ],
    "tensorflow_similarity.losses.barlow": ["Barlow"],
    "tensorflow_similarity.losses.circle_loss": ["CircleLoss", "circle_loss"],
    "tensorflow_similarity.losses.metric_loss": ["MetricLoss"],
    "tensorflow_similarity.losses.multinegrank_loss": [
        "MultiNegativesRankLoss",
        "multineg_ranking_loss",
    ],
    "tensorflow_similarity.losses.multisim_loss": ["MultiSimilarityLoss", "multisimilarity_loss"],
    "tensorflow_similarity.losses.pn_loss": ["PNLoss", "pn_loss"],
    "tensorflow_similarity.losses.simclr": ["SimCLRLoss"],
    "tensorflow_similarity.losses.simsiam": [
        "SimSiamLoss",
        "angular_distance",
        "cosine_distance",
        "negative_cosine_sim",
    ],
    "tensorflow_similarity.losses.softnn_loss": ["SoftNearestNeighborLoss", "soft_nn_loss"],
    "tensorflow_similarity.losses.triplet_loss": ["TripletLoss", "triplet_loss"],
    "tensorflow_similarity.losses.utils": [
        "compute_loss",
        "logsumexp",
        "negative_distances",
        "positive_distances",
        "semi_hard_easy_mask",
    ],
    "tensorflow_similarity.losses.vicreg": ["VicReg"],
    "tensorflow_similarity.losses.xbm_loss": ["XBM"],
    "tensorflow_similarity.matchers": [
        "ClassificationMatch",
        "MatchMajorityVote",
        "MatchNearest",
        "make_classification_matcher",
    ],
    "tensorflow_similarity.matchers.classification_match": ["ClassificationMatch"],
    "tensorflow_similarity.matchers.match_majority_vote": ["MatchMajorityVote"],
    "tensorflow_similarity.matchers.match_nearest": ["MatchNearest"],
    "tensorflow_similarity.matchers.utils": ["make_classification_matcher"],
    "tensorflow_similarity.models": [
        "ContrastiveModel",
        "SimilarityModel",
        "create_contrastive_model",
    ],
    "tensorflow_similarity.models.contrastive_model": [
        "BN_EPSILON",
        "ContrastiveModel",
        "create_contrastive_model",
        "get_predictor",
        "get_projector",
    ],
    "tensorflow_similarity.models.similarity_model": ["SimilarityModel"],
    "tensorflow_similarity.retrieval_metrics": [
        "BNDCG",
        "MapAtK",
        "PrecisionAtK",
        "RecallAtK",
        "RetrievalMetric",
    ],
    "tensorflow_similarity.retrieval_metrics.bndcg": ["BNDCG"],
    "tensorflow_similarity.retrieval_metrics.map_at_k": ["MapAtK"],
    "tensorflow_similarity.retrieval_metrics.precision_at_k": ["PrecisionAtK"],
    "tensorflow_similarity.retrieval_metrics.recall_at_k": ["RecallAtK"],
    "tensorflow_similarity.retrieval_metrics.retrieval_metric": ["RetrievalMetric"],
    "tensorflow_similarity.retrieval_metrics.utils": ["compute_match_mask"],
    "tensorflow_similarity.samplers": [
        "MultiShotFileSampler",
        "MultiShotMemorySampler",
        "SingleShotMemorySampler",
        "TFDatasetMultiShotMemorySampler",
        "TFRecordDatasetSampler",
        "select_examples",
    ],
    "tensorflow_similarity.samplers.file_samplers": ["MultiShotFileSampler", "T", "load_image"],
    "tensorflow_similarity.samplers.memory_samplers": [
        "MultiShotMemorySampler",
        "SingleShotMemorySampler",
    ],
    "tensorflow_similarity.samplers.samplers": ["Batch", "Sampler", "Scheduler"],
    "tensorflow_similarity.samplers.tfdataset_samplers": [
        "PreProcessFn",
        "T",
        "TFDatasetMultiShotMemorySampler",
    ],
    "tensorflow_similarity.samplers.tfrecords_samplers": ["TFRecordDatasetSampler"],
    "tensorflow_similarity.samplers.utils": ["select_examples"],
    "tensorflow_similarity.schedules": ["WarmupCosineDecay"],
    "tensorflow_similarity.search": ["Search", "make_search"],
    "tensorflow_similarity.search.search": ["Search"],
    "tensorflow_similarity.stores": ["MemoryStore", "Store"],
    "tensorflow_similarity.stores.memory_store": ["MemoryStore"],
    "tensorflow_similarity.stores.store": ["Store"],
    "tensorflow_similarity.training_metrics": [
        "DistanceGapMetric",
        "DistanceMetric",
        "avg_neg",
        "avg_pos",
        "batch_class_ratio",
        "dist_gap",
        "max_neg",
        "max_pos",
        "min_neg",
        "min_pos",
        "sum_neg",
        "sum_pos",
    ],
    "tensorflow_similarity.training_metrics.distance_metrics": [
        "DistanceGapMetric",
        "DistanceMetric",
        "avg_neg",
        "avg_pos",
        "dist_gap",
        "max_neg",
        "max_pos",
        "min_neg",
        "min_pos",
        "sum_neg",
        "sum_pos",
    ],
    "tensorflow_similarity.training_metrics.utils": ["batch_class_ratio"],
    "tensorflow_similarity.types": [
        "BoolTensor",
        "CalibrationResults",
        "EqFunc",
        "FloatTensor",
        "IntTensor",
        "Lookup",
        "PandasDataFrame",
        "Symbol",
        "Value",
    ],
    "tensorflow_similarity.utils": [
        "is_tensor_or_variable",
        "tf_cap_memory",
        "unpack_lookup_distances",
        "unpack_lookup_labels",
        "unpack_results",
    ],
    "tensorflow_similarity.visualization": [
        "confusion_matrix",
        "projector",
        "visualize_views",
        "viz_neigbors_imgs",
    ],
    "tensorflow_similarity.visualization.confusion_matrix_viz": ["confusion_matrix"],
    "tensorflow_similarity.visualization.neighbors_viz": ["viz_neigbors_imgs"],
    "tensorflow_similarity.visualization.projector": ["projector", "tensor2images"],
    "tensorflow_similarity.visualization.vizualize_views": ["visualize_views"],
}

# Gone on purpose: nmslib (0.17's default search) cannot be installed on Python 3.10+
# (migration guide, "Similarity models and search").
REMOVED_017_PATHS = {
    "tensorflow_similarity.search": ["NMSLibSearch"],
    "tensorflow_similarity.search.nmslib_search": None,
    "tensorflow_similarity.search.utils": None,
}


@pytest.mark.parametrize("module", sorted(KEPT_017_PATHS))
def test_each_017_module_path_imports_and_holds_its_names(module):
    imported = importlib.import_module(module)

    missing = [name for name in KEPT_017_PATHS[module] if not hasattr(imported, name)]

    assert not missing, f"{module} lost 0.17's names {missing}"


def test_0_17_import_forms_give_the_same_objects():
    import tensorflow_similarity as tfsim
    from tensorflow_similarity.augmenters.augmenter import Augmenter
    from tensorflow_similarity.augmenters.barlow import BarlowAugmenter
    from tensorflow_similarity.augmenters.contrastive import ContrastiveAugmenter
    from tensorflow_similarity.augmenters.simclr import SimCLRAugmenter
    from tensorflow_similarity.samplers.memory_samplers import MultiShotMemorySampler
    from tensorflow_similarity.training_metrics.distance_metrics import DistanceMetric, max_pos
    from tensorflow_similarity.visualization.neighbors_viz import viz_neigbors_imgs
    from tensorflow_similarity.visualization.projector import projector

    assert Augmenter is tfsim.augmenters.Augmenter
    assert ContrastiveAugmenter is tfsim.augmenters.ContrastiveAugmenter
    assert BarlowAugmenter is tfsim.augmenters.BarlowAugmenter
    assert SimCLRAugmenter is tfsim.augmenters.SimCLRAugmenter
    assert MultiShotMemorySampler is tfsim.samplers.MultiShotMemorySampler
    assert DistanceMetric is tfsim.training_metrics.DistanceMetric
    assert max_pos is tfsim.training_metrics.max_pos
    assert viz_neigbors_imgs is tfsim.visualization.viz_neigbors_imgs
    # 0.17's package attribute `visualization.projector` is the function, not the module.
    assert projector is tfsim.visualization.projector
    assert callable(tfsim.visualization.projector)


def test_every_subpackage_0_17_imported_is_a_package_attribute():
    import tensorflow_similarity as tfsim

    for name in KEPT_017_PATHS["tensorflow_similarity"]:
        assert hasattr(tfsim, name), name
    assert tfsim.augmenters.augmentation_utils.cropping.crop_and_resize is not None


def test_visualization_is_imported_on_first_use():
    # Its matplotlib is an optional extra: `import tensorflow_similarity` leaves it out.
    code = (
        "import sys, tensorflow_similarity as t; "
        "assert 'tensorflow_similarity.visualization' not in sys.modules; "
        "assert callable(t.visualization.projector)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


@pytest.mark.parametrize("module", sorted(REMOVED_017_PATHS))
def test_removed_017_paths_stay_removed(module):
    names = REMOVED_017_PATHS[module]
    if names is None:
        with pytest.raises(ImportError):
            importlib.import_module(module)
        return
    imported = importlib.import_module(module)
    assert not [name for name in names if hasattr(imported, name)]


def test_augmentation_utils_is_an_attribute_of_a_fresh_import():
    """0.17's notebooks call tfsim.augmenters.augmentation_utils.* after importing the package
    alone: checked in a fresh process, where no other test imported the subpackage first."""
    code = (
        "import tensorflow_similarity as tfsim; "
        "print(callable(tfsim.augmenters.augmentation_utils.cropping.crop_and_resize))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "True"


def test_0_17_model_builders_import_first_from_their_0_17_module():
    # In a fresh process, so that no earlier import of `models` decides the order.
    code = (
        "from tensorflow_similarity.models.contrastive_model import ("
        "create_contrastive_model, get_predictor, get_projector); "
        "import tensorflow_similarity.models as m; "
        "assert create_contrastive_model is m.create_contrastive_model; "
        "assert get_projector is m.get_projector and get_predictor is m.get_predictor"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
