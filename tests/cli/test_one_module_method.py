"""A method is one module: registered before the command line is parsed, it is a valid method.

`tests/cli/one_module_method.py` holds a class and its registration, nothing
else; the model factory, `tfsim pretrain` (in this process, on photographs'
data as on glyphs') and the docs' table of methods take it. Installed
packages declare theirs under an entry-point group, loaded when the parser is
built. Every test leaves the registry with the built-in methods only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import warnings

import keras
import pytest

from tensorflow_similarity import augmenters, losses
from tensorflow_similarity.cli import build_parser, main
from tensorflow_similarity.cli.pretrain import view_augmenter
from tensorflow_similarity.models import create_contrastive_model
from tensorflow_similarity.models.algorithms import (
    ENTRY_POINT_GROUP,
    algorithm_names,
    get_algorithm,
    register_algorithm,
    registry,
    unregister_algorithm,
)
from tests.cli.test_cli_lars import resolved
from tests.docs.test_site_hooks import generated_pages
from tests.models.contrastive_fixtures import tiny_backbone

MODULE = "tests.cli.one_module_method"
NAME = "tiny_simclr"
# The views each built-in method trained on when the command line held them in a table.
BUILT_IN_VIEWS = {
    "simsiam": augmenters.simsiam_augmenter,
    "simclr": augmenters.simclr_augmenter,
    "barlow": augmenters.barlow_augmenter,
    "vicreg": augmenters.barlow_augmenter,
    "byol": augmenters.simclr_augmenter,
    "mocov3": augmenters.simclr_augmenter,
    "dino": augmenters.simclr_augmenter,
}


def _unregister(name: str) -> None:
    if name in algorithm_names():
        unregister_algorithm(name)


@pytest.fixture(scope="module")
def method():
    """The module's method, registered (importing the module does, once a process)."""
    cls = importlib.import_module(MODULE).TinySimCLR
    if NAME not in algorithm_names():
        register_algorithm(cls)
    yield NAME
    _unregister(NAME)


def test_the_model_factory_builds_it(method):
    model = create_contrastive_model(
        tiny_backbone(), method, projector_hidden_dim=8, projector_output_dim=4
    )
    assert model.algorithm == method
    assert isinstance(model._default_loss, losses.SimCLRLoss)
    assert model._default_loss.temperature == 0.2


def test_tfsim_pretrain_trains_it_on_photographs_in_process(method, tmp_path):
    output = tmp_path / "run"
    argv = ["pretrain", "--algorithm", method, "--data", "digits", "--width", "0.25"]
    argv += ["--limit", "40", "--batch-size", "32", "--projector-dim", "16", "--epochs", "1"]
    # Op determinism and logical devices are the whole process's: the tests keep their own.
    argv += ["--strategy", "one-device", "--no-deterministic", "--output", str(output)]
    assert main(argv) == 0
    assert len(json.loads((output / "history.json").read_text())["epochs"]) == 1
    assert json.loads((output / "run.json").read_text())["options"]["algorithm"] == method
    model = keras.saving.load_model(output / "model.keras")
    assert model.algorithm == method


def test_tfsim_draws_the_views_the_method_declares_for_photographs_and_glyphs(method):
    photos = view_augmenter(resolved(["pretrain", "--algorithm", method, "--data", "digits"]))
    assert (
        photos.get_config() == augmenters.simsiam_augmenter(8, seed=0, flip_prob=0.0).get_config()
    )
    glyphs = view_augmenter(resolved(["pretrain", "--algorithm", method, "--data", "glyphs"]))
    assert isinstance(glyphs, augmenters.GlyphAugmenter)


def test_the_docs_table_of_methods_has_its_row(method):
    rows = generated_pages.method_table().splitlines()
    assert f'| `"{method}"` | the tests\' own | every other image' in rows[-1]
    assert len(rows) == 2 + len(algorithm_names())


def test_the_command_line_offers_it_and_lists_it_in_its_help(method, monkeypatch):
    assert resolved(["pretrain", "--algorithm", method]).algorithm == method
    names = ", ".join(algorithm_names())
    monkeypatch.setenv("COLUMNS", "1000")  # One line per help entry.
    assert f"pretraining ({names}) and" in build_parser().format_help()


@pytest.mark.parametrize("algorithm", sorted(BUILT_IN_VIEWS))
def test_each_built_in_method_keeps_its_views(algorithm):
    args = resolved(["pretrain", "--algorithm", algorithm, "--data", "digits"])
    expected = BUILT_IN_VIEWS[algorithm](args.image_size, seed=args.seed)
    assert view_augmenter(args).get_config() == expected.get_config()
    glyphs = resolved(["pretrain", "--algorithm", algorithm, "--data", "glyphs"])
    assert isinstance(view_augmenter(glyphs), augmenters.GlyphAugmenter)


def test_dino_warms_its_teacher_temperature_over_a_third_of_the_run():
    assert get_algorithm("dino").run_options(10) == {"warmup_teacher_temperature_epochs": 3}
    assert get_algorithm("dino").run_options(1) == {"warmup_teacher_temperature_epochs": 0}
    assert get_algorithm("byol").run_options(10) is None


@pytest.fixture
def entry_points(monkeypatch):
    """Installs fake entry points of the group: `monkeypatch`'s list, loaded afresh."""
    declared: list[importlib.metadata.EntryPoint] = []

    def fake(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [e for e in declared if e.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)
    monkeypatch.setattr(registry, "_LOADED_ENTRY_POINTS", set())
    yield declared
    _unregister(NAME)


def test_an_installed_packages_method_is_offered_and_a_broken_one_named(entry_points):
    _unregister(NAME)
    entry_points += [
        importlib.metadata.EntryPoint(NAME, f"{MODULE}:TinySimCLR", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("nnclr", "tests.cli.no_such_module:NNCLR", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("numpy", "numpy:ndarray", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("elsewhere", "x:y", "another.group"),
    ]
    with pytest.warns(RuntimeWarning) as warned:
        parser = build_parser()
    messages = [str(w.message) for w in warned]
    assert len(messages) == 2
    assert "entry point 'nnclr' (tests.cli.no_such_module:NNCLR)" in messages[0]
    assert "ModuleNotFoundError" in messages[0]
    assert "entry point 'numpy' (numpy:ndarray)" in messages[1]
    assert "not a ContrastiveAlgorithm subclass" in messages[1]
    assert parser.parse_args(["pretrain", "--algorithm", NAME]).algorithm == NAME
    assert type(get_algorithm(NAME)).__name__ == "TinySimCLR"
    with pytest.raises(SystemExit):
        parser.parse_args(["pretrain", "--algorithm", "nnclr"])
    # Loaded once a process: building the parser again warns no more.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        build_parser()
    assert not again
