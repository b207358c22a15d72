"""The supervised `tfsim train` job and `tfsim lookup`.

Quick runs are made in this process with `main([...])` on one device (the
8 logical CPUs of conftest already exist, so the command cannot make its
own); `--no-deterministic` keeps TensorFlow's global op determinism off for
the other tests of the session. The runs with 2 replicas and synchronised
batch norm (the default, resume after an interruption) are subprocesses, as
in test_cli.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import keras
import matplotlib
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageDraw, ImageFont

from tensorflow_similarity.architectures.registry import BUILDERS
from tensorflow_similarity.augmenters import simsiam_augmenter
from tensorflow_similarity.cli import lookup, main, run_folder
from tensorflow_similarity.cli.fitting import inference_function
from tensorflow_similarity.cli.metric import LOSSES, balanced_batches, metric_loss
from tensorflow_similarity.cli.metric_options import SUPERVISED_ALGORITHMS
from tensorflow_similarity.cli.options import resolve_defaults
from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.cli.retrieval import RetrievalEvaluation
from tensorflow_similarity.datasets import load_data, read_image
from tensorflow_similarity.layer_walk import all_layers
from tensorflow_similarity.models.index_mixin import index_path
from tensorflow_similarity.stores.npz import write_npz
from tensorflow_similarity.testing import mirrored_strategy
from tests.cli.test_cli import (
    history,
)
from tests.cli.test_cli_run_folder import InterruptAtTrainBegin
from tests.stores.test_memory_store import _Payload

LIMIT = 160
# One quick in-process run: 160 digits (about 75 training images of the 6 seen classes).
IN_PROCESS = [
    "--data",
    "digits",
    "--strategy",
    "one-device",
    "--no-deterministic",
    "--limit",
    str(LIMIT),
    "--batch-size",
    "12",
    "--epochs",
    "1",
    "--embedding-size",
    "16",
]
# Two replicas, synchronised batch norm, deterministic: for the resume test.
QUICK = [
    "--data",
    "digits",
    "--limit",
    "240",
    "--batch-size",
    "12",
    "--epochs",
    "2",
    "--embedding-size",
    "16",
]


@pytest.mark.parametrize(
    "algorithm, expected",
    [("multisimilarity", 0.05), ("circle", 0.005), ("arcface", 0.005), ("simsiam", 0.05)],
)
def test_default_learning_rate_is_the_losss_and_an_explicit_one_wins(algorithm, expected):
    parser = build_parser()
    argv = ["train", "--data", "digits", "--algorithm", algorithm]
    args = parser.parse_args(argv)
    resolved = resolve_defaults(args, {"data": "digits"})
    assert resolved.learning_rate == expected and resolved.optimizer == "sgd"
    args = parser.parse_args([*argv, "--learning-rate", "0.3"])
    assert resolve_defaults(args, {"data": "digits", "learning_rate": 0.3}).learning_rate == 0.3


@pytest.mark.parametrize(
    "argv, expected",
    [
        # Supervised on glyphs: Adam at 1e-3, 16 of the 62 Latin classes x 4 images, 16x16.
        (
            ["--algorithm", "multisimilarity"],
            {
                "optimizer": "adam",
                "learning_rate": 1e-3,
                "train_classes": 62,
                "classes_per_batch": 16,
                "batch_size": 64,
                "epochs": 12,
                "image_size": 16,
                "eval_every": 4,
                "width": 1.0,
            },
        ),
        (["--algorithm", "circle", "--optimizer", "sgd"], {"learning_rate": 0.005}),
        (["--algorithm", "triplet", "--train-classes", "10"], {"classes_per_batch": 10}),
        (
            ["--algorithm", "triplet", "--data", "digits"],
            {
                "optimizer": "sgd",
                "train_classes": 6,
                "classes_per_batch": None,
                "image_size": 8,
                "eval_every": 1,
            },
        ),
        # Self-supervised on glyphs: SimCLR with Adam, quarter-width, 30 epochs at 16x16; SimSiam
        # elsewhere.
        (
            [],
            {
                "algorithm": "simclr",
                "optimizer": "adam",
                "learning_rate": 1e-3,
                "epochs": 30,
                "image_size": 16,
                "batch_size": 128,
                "eval_every": 1,
                "width": 0.25,
            },
        ),
        (
            ["--data", "digits"],
            {"algorithm": "simsiam", "optimizer": "sgd", "epochs": 3, "width": 1.0},
        ),
        (["--width", "0.5"], {"width": 0.5}),
        # The glyphs' quarter width is resnet18's: another backbone keeps its own widths.
        (["--backbone", "convnext"], {"width": 1.0, "epochs": 30}),
        (["--algorithm", "simsiam"], {"algorithm": "simsiam", "optimizer": "adam"}),
        (["--algorithm", "triplet", "--eval-every", "2"], {"eval_every": 2}),
    ],
)
def test_defaults_follow_the_data_and_explicit_options_win(argv, expected):
    argv = ["train", *argv]
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    resolved = vars(resolve_defaults(build_parser().parse_args(argv), explicit))
    assert {key: resolved[key] for key in expected} == expected


def run_main(*args: str) -> int:
    return main(["train", *args])


_RUNS: dict[str, tuple[Path, int]] = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Makes the quick run of an algorithm when a test first asks for it: (folder, status)."""
    root = tmp_path_factory.mktemp("supervised")

    def run(algorithm: str) -> tuple[Path, int]:
        if algorithm not in _RUNS:
            output = root / algorithm
            status = run_main("--algorithm", algorithm, *IN_PROCESS, "--output", str(output))
            _RUNS[algorithm] = (output, status)
        return _RUNS[algorithm]

    yield run
    _RUNS.clear()


# Each quick run costs tens of seconds (a ResNet-18 traced): two in the fast loop.
FAST_ALGORITHMS = ("multisimilarity", "arcface")


def test_every_algorithm_has_a_loss():
    assert set(LOSSES) == set(SUPERVISED_ALGORITHMS)


@pytest.mark.parametrize("algorithm", ["proxyanchor", "proxynca"])
def test_a_proxy_loss_has_one_proxy_per_training_class_of_the_embedding_size(algorithm):
    args = argparse.Namespace(algorithm=algorithm, embedding_size=16)

    loss = metric_loss(args, 6)

    assert isinstance(loss, LOSSES[algorithm]) and loss.proxies.shape == (6, 16)


@pytest.mark.parametrize(
    "algorithm",
    [
        name if name in FAST_ALGORITHMS else pytest.param(name, marks=pytest.mark.slow)
        for name in SUPERVISED_ALGORITHMS
        # ProxyNCA's run is ProxyAnchor's with another loss class (the suite's time): both
        # losses train, save and load through SimilarityModel in tests/losses/test_proxy_losses.py.
        if name != "proxynca"
    ],
)
def test_each_algorithm_trains_and_writes_its_outputs(runs, algorithm):
    output, status = runs(algorithm)
    assert status == 0
    for name in ["model.keras", "history.json", "run.json", "summary.json"]:
        assert (output / name).is_file(), name
    for plot in ["loss.png", "retrieval.png", "neighbours.png", "embeddings.png"]:
        assert (output / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
    assert list((output / "logs" / "train").glob("events.out.tfevents.*"))
    assert (output / "model.index").is_dir()
    assert not (output / "backup").exists()
    # Every file is one `--overwrite` knows to delete, and the model and index are recorded.
    assert {p.name for p in output.iterdir()} <= set(run_folder.RUN_FILES)
    recorded = json.loads((output / "run.json").read_text())["finished"]["sha256"]
    assert "model.keras" in recorded and "model.index/index_metadata.json" in recorded
    recorded = history(output)
    assert [r["epoch"] for r in recorded["epochs"]] == [1]
    assert np.isfinite(recorded["epochs"][0]["loss"])
    for key in ["recall_at_1_seen", "map_at_r_seen", "recall_at_1_unseen", "map_at_r_unseen"]:
        assert 0.0 <= recorded["retrieval_before"][key] <= 1.0
        assert 0.0 <= recorded["epochs"][0][key] <= 1.0
    model = keras.saving.load_model(output / "model.keras")
    # The saved model embeds (ArcFace's class centres are left out).
    assert model.predict(np.zeros((2, 8, 8, 3), np.float32), verbose=0).shape == (2, 16)


def test_eval_every_and_width_reach_the_run(tmp_path):
    # Epochs 1-3, evaluated after epochs 2 and 3 (the last). That the final model does not
    # depend on the schedule is test_cli_fitting's test of EvaluationSchedule.
    argv = [*IN_PROCESS[:-4], "--epochs", "3", "--embedding-size", "16", "--eval-every", "2"]
    argv += ["--width", "0.5"]
    output = tmp_path / "out"
    assert run_main("--algorithm", "multisimilarity", *argv, "--output", str(output)) == 0
    figures = ["recall_at_1_seen", "map_at_r_seen", "recall_at_1_unseen", "map_at_r_unseen"]
    records = history(output)["epochs"]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [[key in r for key in figures] for r in records] == [[False] * 4, [True] * 4, [True] * 4]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["after"] == {key: records[-1][key] for key in summary["after"]}
    assert (output / "retrieval.png").read_bytes()[:4] == b"\x89PNG"
    # --width 0.5 reached the network: 32 filters in the stem.
    model = keras.saving.load_model(output / "model.keras")
    assert model.get_layer("resnet18").get_layer("conv1_conv").filters == 32


def _numpy_retrieval(index_x, index_y, query_x, query_y, seen_classes):
    """recall@1 and mAP@R with float64 loops: R = indexed images of the query's class."""
    index_x = index_x / np.linalg.norm(index_x, axis=1, keepdims=True)
    query_x = query_x / np.linalg.norm(query_x, axis=1, keepdims=True)
    figures = {}
    for group, members in (("seen", True), ("unseen", False)):
        recalls, precisions = [], []
        for query, label in zip(query_x, query_y, strict=True):
            if (label in seen_classes) != members:
                continue
            distances = [1.0 - float(np.dot(query, item)) for item in index_x]
            order = sorted(range(len(distances)), key=lambda i: distances[i])
            recalls.append(float(index_y[order[0]] == label))
            r = int(sum(1 for y in index_y if y == label))
            hits, total = 0, 0.0
            for rank, item in enumerate(order[:r], start=1):
                if index_y[item] == label:
                    hits += 1
                    total += hits / rank
            precisions.append(total / r)
        figures[f"recall_at_1_{group}"] = sum(recalls) / len(recalls)
        figures[f"map_at_r_{group}"] = sum(precisions) / len(precisions)
    return figures


def test_summary_figures_equal_a_numpy_recomputation(runs):
    output, _ = runs("multisimilarity")
    data = load_data("digits", 8, seed=0, limit=LIMIT)
    model = keras.saving.load_model(output / "model.keras")
    model.load_index(output / "model.keras")
    index_embeddings = np.asarray(model.predict(data.x_train, verbose=0), np.float64)
    query_embeddings = np.asarray(model.predict(data.x_test, verbose=0), np.float64)
    expected = _numpy_retrieval(
        index_embeddings, data.y_train, query_embeddings, data.y_test, set(range(6))
    )
    # The augmented queries: the first view of each test image under SimSiam's augmentations
    # without the flip, seeded by the run's seed, at a step no training batch uses.
    views = simsiam_augmenter(8, seed=0, flip_prob=0.0)(tf.constant(data.x_test), step=-1)[0]
    augmented = _numpy_retrieval(
        index_embeddings,
        data.y_train,
        np.asarray(model.predict(views.numpy(), verbose=0), np.float64),
        data.y_test,
        set(range(6)),
    )
    expected.update({f"{key}_augmented": value for key, value in augmented.items()})
    summary = json.loads((output / "summary.json").read_text())
    assert summary["index_size"] == len(data.y_train)
    # Not closer: a one-epoch model has float32 near-ties (distances 1e-8 apart) that the
    # index's search and the float64 loop may order either way, moving an AP by ~1e-4.
    assert summary["after"] == pytest.approx(expected, abs=2e-3)
    assert summary["after"] == pytest.approx(
        {k: history(output)["epochs"][-1][k] for k in expected}
    )
    # The saved index holds the training images of every class, with their labels.
    nearest = model.lookup(data.x_test, k=1, verbose=0)
    normed = index_embeddings / np.linalg.norm(index_embeddings, axis=1, keepdims=True)
    queries = query_embeddings / np.linalg.norm(query_embeddings, axis=1, keepdims=True)
    agree = 0
    for row, query in zip(nearest, queries, strict=True):
        distances = 1.0 - normed @ query
        first, second = np.sort(distances)[:2]
        assert row[0].distance == pytest.approx(first, abs=1e-5)
        if second - first > 1e-5:
            agree += int(row[0].label) == int(data.y_train[np.argmin(distances)])
        else:
            agree += 1  # a near-tie: either is the nearest
    assert agree == len(queries)


def test_augmented_queries_are_scored_apart_and_only_when_given():
    rng = np.random.default_rng(0)
    index_x, query_x = rng.normal(size=(40, 5)), rng.normal(size=(20, 5))
    index_y, query_y = np.arange(40) % 4, np.arange(20) % 4
    augmented_x = query_x + rng.normal(scale=2.0, size=query_x.shape)

    def embed(x):
        return np.asarray(x, np.float32)

    clean = RetrievalEvaluation(embed, index_x, index_y, query_x, query_y, [0, 1]).evaluate()
    assert set(clean) == {
        "recall_at_1_seen",
        "map_at_r_seen",
        "recall_at_1_unseen",
        "map_at_r_unseen",
    }
    both = RetrievalEvaluation(
        embed, index_x, index_y, query_x, query_y, [0, 1], augmented_x
    ).evaluate()
    expected = _numpy_retrieval(index_x, index_y, augmented_x, query_y, {0, 1})
    assert both == pytest.approx(
        {**clean, **{f"{key}_augmented": value for key, value in expected.items()}}, abs=1e-6
    )
    assert both["recall_at_1_seen_augmented"] != clean["recall_at_1_seen"]


def test_batches_are_class_balanced_and_a_function_of_seed_and_step():
    labels = np.repeat(np.arange(6), 10)
    whole = balanced_batches(labels, 3, 4, seed=5, first_step=0, last_step=8)
    assert whole.shape == (8, 12)
    for batch in whole:
        counts = np.unique(labels[batch], return_counts=True)[1]
        assert counts.tolist() == [4, 4, 4]
        assert len(set(batch.tolist())) == 12  # without replacement
    np.testing.assert_array_equal(whole[5:], balanced_batches(labels, 3, 4, 5, 5, 8))
    assert not np.array_equal(whole, balanced_batches(labels, 3, 4, 6, 0, 8))


BAD_INPUTS = {
    "one train class": (["--train-classes", "1"], "--train-classes must be at least 2"),
    "more train classes than the data": (
        ["--train-classes", "11", "--batch-size", "44", "--strategy", "one-device"],
        "--train-classes 11 but",
    ),
    "batch not a multiple of the classes": (
        ["--batch-size", "13"],
        "--batch-size 13 must be a multiple of the 6 classes",
    ),
    "too many classes per batch": (
        ["--classes-per-batch", "7"],
        "--classes-per-batch must be between 2 and --train-classes (6)",
    ),
    "projector option": (["--projector-dim", "64"], "--projector-dim is an option of"),
    "embedding size": (["--embedding-size", "0"], "--embedding-size must be at least 1"),
    "evaluation never": (["--eval-every", "0"], "--eval-every must be at least 1"),
    "no width": (["--width", "0"], "--width must be a positive number"),
    "width of another backbone": (
        ["--width", "0.5", "--backbone", "efficientnet", "--image-size", "32"],
        "--width applies to --backbone resnet18",
    ),
    "batch larger than the seen images": (
        ["--limit", "40", "--strategy", "one-device"],
        "larger than the",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_supervised_input_is_a_clear_error_before_training(tmp_path, capsys, case):
    args, message = BAD_INPUTS[case]
    output = tmp_path / "out"
    status = run_main("--algorithm", "triplet", "--data", "digits", *args, "--output", str(output))
    error = capsys.readouterr().err
    assert status == 2, error
    assert error.startswith("tfsim: error:") and message in error
    assert not (output / "run.json").exists()


def test_supervised_option_given_to_a_self_supervised_run_is_an_error(tmp_path, capsys):
    status = run_main("--train-classes", "4", "--output", str(tmp_path / "out"))
    error = capsys.readouterr().err
    assert status == 2
    assert "--train-classes is an option of supervised runs" in error


def write_query_images(folder: Path, count: int = 4) -> list[Path]:
    data = load_data("digits", 8, seed=0, limit=LIMIT)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"query{i}.png"
        pixels = tf.cast(tf.round(data.x_test[i] * 255.0), tf.uint8)
        path.write_bytes(tf.io.encode_png(pixels).numpy())
        paths.append(path)
    return paths


def _loop_neighbours(output: Path, paths: list[Path], k: int) -> list[list[tuple[int, float]]]:
    """The k nearest (label, cosine distance) of each image by a float64 loop."""
    data = load_data("digits", 8, seed=0, limit=LIMIT)
    model = keras.saving.load_model(output / "model.keras")
    index = np.asarray(model.predict(data.x_train, verbose=0), np.float64)
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    queries = np.asarray(
        model.predict(np.stack([read_image(p, 8) for p in paths]), verbose=0), np.float64
    )
    found = []
    for query in queries / np.linalg.norm(queries, axis=1, keepdims=True):
        distances = [
            (1.0 - float(np.dot(query, item)), int(y))
            for item, y in zip(index, data.y_train, strict=True)
        ]
        found.append([(y, d) for d, y in sorted(distances)[:k]])
    return found


def test_lookup_json_and_text_match_a_numpy_nearest_neighbour_search(runs, tmp_path, capsys):
    output, _ = runs("multisimilarity")
    paths = write_query_images(tmp_path / "queries")
    expected = _loop_neighbours(output, paths, k=3)
    capsys.readouterr()  # the run's own output, when this test made it

    assert (
        main(["lookup", "--output", str(output), "--k", "3", "--json", str(tmp_path / "queries")])
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in results] == [str(p) for p in paths]
    for result, loop in zip(results, expected, strict=True):
        assert [n["rank"] for n in result["neighbours"]] == [1, 2, 3]
        distances = [d for _, d in loop]
        for rank, (n, (label, distance)) in enumerate(zip(result["neighbours"], loop, strict=True)):
            # A near-tie with the next or previous neighbour may be ordered either way.
            gaps = [abs(distance - d) for j, d in enumerate(distances) if j != rank]
            if min(gaps) > 1e-5:
                assert n["label"] == label and n["class"] == str(label)
        np.testing.assert_allclose(
            [n["distance"] for n in result["neighbours"]], [d for _, d in loop], atol=1e-5
        )

    assert main(["lookup", "--output", str(output), "--k", "2", str(paths[1]), str(paths[0])]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == str(paths[1]) and text[4] == str(paths[0])
    for lines, loop in ((text[2:4], expected[1]), (text[6:8], expected[0])):
        for rank, (line, (_label, distance)) in enumerate(zip(lines, loop, strict=False), start=1):
            fields = line.split()
            assert fields[0] == str(rank) and fields[1] == fields[2]
            assert float(fields[3]) == pytest.approx(distance, abs=2e-6)
            assert int(fields[1]) in {y for y, d in loop if abs(d - distance) <= 1e-5}


def _mixed(tmp_path: Path, finished: Path, other: Path, name: str) -> Path:
    """A copy of `finished` with `name` (a file or folder) taken from the run in `other`."""
    mixed = tmp_path / f"with_other_{name}"
    shutil.copytree(finished, mixed)
    if (other / name).is_dir():
        shutil.rmtree(mixed / name)
        shutil.copytree(other / name, mixed / name)
    else:
        shutil.copy(other / name, mixed / name)
    return mixed


def _lookup_errors(tmp_path: Path, finished: Path, other: Path) -> dict[str, tuple[list[str], str]]:
    image = write_query_images(tmp_path / "queries", count=1)[0]
    ssl = tmp_path / "ssl"
    ssl.mkdir()
    (ssl / "run.json").write_text(json.dumps({"options": {"algorithm": "simsiam"}}))
    (ssl / "model.keras").write_bytes(b"")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(finished / "run.json", unfinished / "run.json")
    no_index = tmp_path / "no_index"
    no_index.mkdir()
    for name in ["run.json", "model.keras"]:
        shutil.copy(finished / name, no_index / name)
    (tmp_path / "broken.png").write_bytes(b"not an image")
    (tmp_path / "empty").mkdir()
    good = str(image)
    return {
        "self-supervised run": (["--output", str(ssl), good], "holds a self-supervised run"),
        "no run": (["--output", str(tmp_path / "empty"), good], "no run.json"),
        "no model": (["--output", str(unfinished), good], "has no model.keras"),
        "no index": (["--output", str(no_index), good], "but no index"),
        "model of another run": (
            ["--output", str(_mixed(tmp_path, finished, other, "model.keras")), good],
            "model.keras is not what its run wrote",
        ),
        "index of another run": (
            ["--output", str(_mixed(tmp_path, finished, other, "model.index")), good],
            "model.index/ is not what its run wrote",
        ),
        "run.json of another run": (
            ["--output", str(_mixed(tmp_path, finished, other, "run.json")), good],
            "model.keras, model.index/ are not what its run wrote",
        ),
        "missing image": (
            ["--output", str(finished), str(tmp_path / "nope.png")],
            "does not exist",
        ),
        "unreadable image": (
            ["--output", str(finished), str(tmp_path / "broken.png")],
            "broken.png",
        ),
        "folder without images": (
            ["--output", str(finished), str(tmp_path / "empty")],
            "holds no images",
        ),
        "k below 1": (["--output", str(finished), "--k", "0", good], "--k must be at least 1"),
        "k above the index": (
            ["--output", str(finished), "--k", "100000", good],
            "--k 100000 is larger than the",
        ),
    }


LOOKUP_ERRORS = [
    "self-supervised run",
    "no run",
    "no model",
    "no index",
    "model of another run",
    "index of another run",
    "run.json of another run",
    "missing image",
    "unreadable image",
    "folder without images",
    "k below 1",
    "k above the index",
]


@pytest.mark.parametrize("case", LOOKUP_ERRORS)
def test_lookup_errors_are_clear(runs, tmp_path, capsys, case):
    args, message = _lookup_errors(tmp_path, runs("multisimilarity")[0], runs("arcface")[0])[case]
    capsys.readouterr()  # the runs' own output, when this test made them
    status = main(["lookup", *args])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.err.startswith("tfsim: error:") and message in captured.err
    assert captured.out == ""


def test_lookup_on_a_glyphs_run_names_the_characters(tmp_path, capsys):
    """A quick glyphs run, then a letter drawn by the user (Greek capital Omega, at 40x40)."""
    output = tmp_path / "glyphs"
    options = ["--train-classes", "20", "--classes-per-batch", "4", "--batch-size", "16"]
    status = main(
        ["train", "--algorithm", "multisimilarity", *IN_PROCESS[2:5], "--limit", "600"]
        + [*options, "--epochs", "1", "--embedding-size", "16", "--output", str(output)]
    )
    assert status == 0
    font = ImageFont.truetype(
        str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSerif-Bold.ttf"), 30
    )
    canvas = Image.new("RGB", (40, 40))
    ImageDraw.Draw(canvas).text((5, 2), "\u03a9", fill=(255, 255, 255), font=font)
    path = tmp_path / "omega.png"
    canvas.save(path)
    capsys.readouterr()
    assert main(["lookup", "--output", str(output), "--k", "3", "--json", str(path)]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    names = json.loads((output / "run.json").read_text())["class_names"]
    assert "A \u0391 \u0410" in names  # glyphs' class names: the characters of each class
    found = result["neighbours"]
    assert [n["class"] for n in found] == [names[n["label"]] for n in found]
    # The distances of a float64 loop over the run's indexed (training) images.
    data = load_data("glyphs", 16, seed=0, limit=600)
    model = keras.saving.load_model(output / "model.keras")
    index = np.asarray(model.predict(data.x_train, verbose=0), np.float64)
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    query = np.asarray(model.predict(read_image(path, 16)[None], verbose=0), np.float64)[0]
    query /= np.linalg.norm(query)
    loop = sorted(1.0 - float(np.dot(query, item)) for item in index)[:3]
    np.testing.assert_allclose([n["distance"] for n in found], loop, atol=1e-5)


def test_lookup_never_unpickles_an_index_file(runs, tmp_path, capsys):
    finished, _ = runs("multisimilarity")
    shared = tmp_path / "shared"
    shutil.copytree(finished, shared)
    marker = tmp_path / "payload-ran"
    store = index_path(shared / "model.keras") / "memory_store.npz"
    with np.load(store, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files if key not in ("kind", "format_version")}
    data = np.empty(len(arrays["labels"]), dtype=object)
    data[:] = [_Payload(marker)] * len(data)
    write_npz(store, {**arrays, "data": data}, kind="MemoryStore", format_version=1)
    run_folder.finish(shared)  # whoever crafted the store recorded it in run.json too
    image = write_query_images(tmp_path / "queries", count=1)[0]
    capsys.readouterr()

    status = main(["lookup", "--output", str(shared), str(image)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert "Python objects" in captured.err and "--no-safe-mode" in captured.err
    assert not marker.exists()


def test_lookup_names_a_file_its_run_did_not_write_and_ignores_a_browsers_own(
    runs, tmp_path, capsys
):
    copy = tmp_path / "copy"
    shutil.copytree(runs("multisimilarity")[0], copy)
    image = write_query_images(tmp_path / "queries", count=1)[0]
    notes = index_path(copy / "model.keras") / "notes.txt"
    notes.write_text("not the index's")
    capsys.readouterr()
    assert main(["lookup", "--output", str(copy), str(image)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tfsim: error:")
    assert "not written by the run: model.index/notes.txt" in error and "Remove" in error
    notes.unlink()
    # Finder's and Windows Explorer's files: never read by the index, so no reason to refuse.
    for name in [".DS_Store", "._memory_store.npz", "Thumbs.db"]:
        (index_path(copy / "model.keras") / name).write_bytes(b"\x00\x01")
    assert main(["lookup", "--output", str(copy), "--json", str(image)]) == 0
    assert len(json.loads(capsys.readouterr().out)[0]["neighbours"]) == 5


def test_lookup_of_a_model_with_a_lambda_layer_names_no_safe_mode(runs, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(runs("multisimilarity")[0], copy)
    lambda_model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Lambda(lambda x: x)])
    lambda_model.save(copy / "model.keras")
    run_folder.finish(copy)  # whoever put it there recorded it in run.json too
    image = write_query_images(tmp_path / "queries", count=1)[0]
    capsys.readouterr()
    status = main(["lookup", "--output", str(copy), str(image)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.startswith("tfsim: error:")
    assert str(copy / "model.keras") in captured.err and "--no-safe-mode" in captured.err
    assert "Traceback" not in captured.err


def test_lookup_refuses_an_image_of_too_many_pixels_before_decoding_any(
    runs, tmp_path, capsys, monkeypatch
):
    finished, _ = runs("multisimilarity")
    good = write_query_images(tmp_path / "queries", count=1)[0]
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12_000, 12_000)).save(bomb)  # a few kilobytes, 144 million pixels
    decoded = []
    monkeypatch.setattr(lookup, "read_image", lambda *args, **kwargs: decoded.append(args))
    capsys.readouterr()
    assert main(["lookup", "--output", str(finished), str(good), str(bomb)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tfsim: error:") and str(bomb) in error
    assert "12,000 x 12,000 pixels" in error and "89,478,485" in error
    assert "--max-image-pixels" in error
    assert decoded == []
    # The option moves the limit, both ways.
    assert main(["lookup", "--output", str(finished), "--max-image-pixels", "63", str(good)]) == 2
    assert "8 x 8 pixels (64)" in capsys.readouterr().err
    assert main(["lookup", "--output", str(finished), "--max-image-pixels", "0", str(good)]) == 2
    assert "--max-image-pixels must be at least 1" in capsys.readouterr().err


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_finished_run_is_not_overwritten_by_a_second_run(runs, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(runs("multisimilarity")[0], output)
    before = _snapshot(output)
    capsys.readouterr()
    status = run_main("--algorithm", "multisimilarity", *IN_PROCESS, "--output", str(output))
    error = capsys.readouterr().err
    assert status == 2, error
    assert error.startswith(f"tfsim: error: --output {str(output)!r} holds a run (")
    assert "that finished (model.keras written)" in error
    assert "Give another --output, or --overwrite to delete that run's files first." in error
    assert _snapshot(output) == before


def test_overwrite_deletes_the_old_run_before_the_new_one_starts(runs, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(runs("multisimilarity")[0], output)
    (output / "notes.txt").write_text("not tfsim's")
    options = ["--algorithm", "multisimilarity", *IN_PROCESS, "--output", str(output)]
    capsys.readouterr()
    # The second run is killed before its first epoch ends.
    status = main(["train", *options, "--overwrite"], callbacks=[InterruptAtTrainBegin()])
    error = capsys.readouterr().err
    assert status == 130, error
    assert "tfsim: interrupted before completing an epoch" in error
    assert f"tfsim train --output {output} --resume" in error
    # Nothing of the old run is left to be taken for the new one's: model, index, plots, logs.
    assert sorted(p.name for p in output.iterdir()) == ["notes.txt", "run.json"]
    image = write_query_images(tmp_path / "queries", count=1)[0]
    assert main(["lookup", "--output", str(output), str(image)]) == 2
    error = capsys.readouterr().err
    assert "has no model.keras: its run stopped before completing an epoch" in error
    assert f"Finish it with: tfsim train --output {output} --resume" in error
    # --resume starts it again, with its options, from the first epoch.
    restart = InterruptAtTrainBegin()
    assert (
        main(
            ["train", "--output", str(output), "--resume", "--no-deterministic"],
            callbacks=[restart],
        )
        == 130
    )
    assert restart.started == 1 and restart.model.optimizer.iterations.numpy() == 0
    assert "tfsim: interrupted before completing an epoch" in capsys.readouterr().err


def test_inference_function_matches_predict_across_chunks_and_replicas():
    # 1,030 images: one full chunk of 1,024 and a remainder, under a 2-replica strategy with
    # sync batch norm (inference uses the moving statistics, set away from 0 and 1 here).
    with mirrored_strategy(2).scope():
        model = BUILDERS["resnet18"]((8, 8, 3), embedding_size=16, sync_bn=True)
    for layer in all_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(tf.fill(layer.moving_mean.shape, 0.1))
            layer.moving_variance.assign(tf.fill(layer.moving_variance.shape, 2.0))
    images = np.random.default_rng(0).random((1030, 8, 8, 3), dtype=np.float32)
    embedded = inference_function(model)(images)
    assert embedded.shape == (1030, 16)
    np.testing.assert_allclose(
        embedded, model.predict(images, batch_size=256, verbose=0), atol=1e-5
    )


def test_export_of_a_finished_run_answers_what_tfsim_lookup_answers(runs, tmp_path, capsys):
    output, _ = runs("multisimilarity")
    paths = write_query_images(tmp_path / "queries", count=3)
    capsys.readouterr()  # the run's own output, when this test made it
    assert main(["lookup", "--output", str(output), "--k", "3", "--json", *map(str, paths)]) == 0
    looked_up = json.loads(capsys.readouterr().out)
    assert main(["export", str(output), str(tmp_path / "served"), "--k", "3", "--uint8"]) == 0
    served = tf.saved_model.load(str(tmp_path / "served"))
    # The PNGs' own pixels, as a server receives them: the graph scales them as lookup does.
    images = np.stack([tf.io.decode_png(path.read_bytes(), channels=3).numpy() for path in paths])
    found = served.signatures["lookup"](images=tf.constant(images))
    for row, result in enumerate(looked_up):
        distances = [n["distance"] for n in result["neighbours"]]
        np.testing.assert_allclose(found["distances"].numpy()[row], distances, atol=1e-5)
        for rank, n in enumerate(result["neighbours"]):
            # The embeddings of two graphs may differ in the last bit: a near-tie either way.
            if min(abs(distances[rank] - d) for j, d in enumerate(distances) if j != rank) > 1e-5:
                assert found["label_names"].numpy()[row][rank] == n["class"].encode()
