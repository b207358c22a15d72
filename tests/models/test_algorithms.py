"""The registry of self-supervised methods, the built-in ones, and one added from outside."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.models.algorithms import (
    ContrastiveAlgorithm,
    Forward,
    algorithm_names,
    get_algorithm,
    register_algorithm,
    unregister_algorithm,
)
from tensorflow_similarity.models.mlp_heads import ProjectorSpec
from tests.models.contrastive_fixtures import ALGORITHMS, tiny_backbone, views


class ToyAgreement(ContrastiveAlgorithm):
    """A method defined outside the package: the mean squared error of unit projections."""

    name = "toy_agreement"
    projector = ProjectorSpec(hidden_layers=1, hidden_dim=8, output_dim=4, output_bn=None)
    concat_views = True

    def default_loss(self) -> keras.losses.Loss:
        return keras.losses.MeanSquaredError()

    def forward(self, model, view1, view2, loss, training) -> Forward:
        z1, z2 = self.project(model, view1, view2, training)
        return Forward(loss(tf.math.l2_normalize(z1, -1), tf.math.l2_normalize(z2, -1)), z1)


@pytest.fixture
def toy():
    register_algorithm(ToyAgreement)
    yield ToyAgreement.name
    unregister_algorithm(ToyAgreement.name)


def test_the_built_in_methods_are_registered_in_order():
    assert algorithm_names()[:9] == (*ALGORITHMS, "byol", "mocov3", "dino", "mocov2", "swav")
    assert get_algorithm("SimCLR") is get_algorithm("simclr")
    with pytest.raises(ValueError, match="Unknown algorithm 'nnclr'. Use one of simsiam, simclr"):
        get_algorithm("nnclr")


# The teachers' papers: projector (hidden layers, hidden, output, output batch norm), the
# predictor's layers and output batch norm, the loss and the base momentum.
TEACHER_PAPERS = {
    "byol": ((1, 4096, 256, None), None, losses.BYOLLoss, 0.996),
    "mocov3": ((2, 4096, 256, "none"), "predictor_bn_out", losses.MoCoV3Loss, 0.99),
    "dino": ((2, 2048, 65536, None), None, losses.DINOLoss, 0.996),
}


@pytest.mark.parametrize("name", TEACHER_PAPERS)
def test_each_teacher_method_declares_its_papers_heads_loss_and_momentum(name):
    (layers, hidden, output, output_bn), predictor_bn, loss, momentum = TEACHER_PAPERS[name]
    method = get_algorithm(name)
    assert method.projector_widths(2048, "paper") == (hidden, output)
    assert (method.projector.hidden_layers, method.projector.output_bn) == (layers, output_bn)
    assert type(method.default_loss()) is loss
    assert method.base_momentum == momentum and method.has_teacher
    predictor = method.build_predictor(64)
    assert (predictor is not None) == (name != "dino")
    if predictor is not None:
        assert predictor.get_layer("predictor_dense0").units == 16 * 64
        names = [layer.name for layer in predictor.layers]
        assert (predictor_bn in names) if predictor_bn else ("predictor_bn_out" not in names)
    assert not get_algorithm("simclr").has_teacher


# The papers' heads (hidden-output widths on ResNet-50, output batch norm), loss and
# whether the views go through the networks as one batch.
PAPERS = {
    "simsiam": (2048, 2048, "none", losses.SimSiamLoss, False, True),
    "simclr": (2048, 128, "center", losses.SimCLRLoss, True, False),
    "barlow": (8192, 8192, None, losses.Barlow, False, False),
    "vicreg": (8192, 8192, None, losses.VicReg, False, False),
}


@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_method_declares_its_papers_heads_and_loss(name):
    hidden, output, output_bn, loss, concat_views, has_predictor = PAPERS[name]
    method = get_algorithm(name)
    assert method.projector_widths(2048, "paper") == (hidden, output)
    assert method.projector.hidden_layers == 2 and method.projector.output_bn == output_bn
    assert type(method.default_loss()) is loss
    assert (method.concat_views, method.has_predictor) == (concat_views, has_predictor)
    predictor = method.build_predictor(64)
    assert (predictor is not None) == has_predictor
    if predictor is not None:
        assert predictor.get_layer("predictor_dense0").units == 16  # a quarter


def test_registering_checks_the_class_and_the_name(toy):
    with pytest.raises(ValueError, match="'toy_agreement' is registered already"):
        register_algorithm(ToyAgreement)
    register_algorithm(ToyAgreement, replace=True)
    with pytest.raises(TypeError, match="ContrastiveAlgorithm subclass"):
        register_algorithm(losses.SimCLRLoss)
    shouting = type("Shouting", (ToyAgreement,), {"name": "TOY"})
    with pytest.raises(ValueError, match="lower-case"):
        register_algorithm(shouting)
    with pytest.raises(ValueError, match="No algorithm named 'nope'"):
        unregister_algorithm("nope")


def test_a_method_registered_outside_the_package_trains_saves_and_loads(toy, tmp_path):
    keras.utils.set_random_seed(2)
    model = create_contrastive_model(tiny_backbone(), toy)
    assert model.predictor is None and model.projector.output.shape == (None, 4)
    with pytest.raises(ValueError, match="only SimSiam, BYOL and MoCo v3 have a predictor"):
        create_contrastive_model(tiny_backbone(), toy, predictor=model.projector)
    view1, view2 = views(6)
    model.compile(optimizer=keras.optimizers.SGD(0.1))

    # The reported loss is the toy's forward pass (evaluate runs it in inference mode).
    def unit_projections(view):
        z = model.projector(model.backbone(view, training=False), training=False)
        return z.numpy() / np.linalg.norm(z.numpy(), axis=-1, keepdims=True)

    expected = np.mean(np.square(unit_projections(view1) - unit_projections(view2)))
    got = model.evaluate(tf.data.Dataset.from_tensors((view1, view2)), verbose=0)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5)

    before = [w.copy() for w in model.get_weights()]
    data = tf.data.Dataset.from_tensors((view1, view2))
    history = model.fit(data, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0]) and "pred_std" not in history
    assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))

    path = tmp_path / "toy.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ContrastiveModel) and loaded.algorithm == toy
    assert loaded.get_config()["concat_views"] is None
    np.testing.assert_allclose(
        loaded.embed(view1, output="projector"), model.embed(view1, output="projector"), atol=1e-6
    )
    expected = model.fit(data, epochs=1, verbose=0).history["loss"][0]
    np.testing.assert_allclose(loaded.fit(data, epochs=1, verbose=0).history["loss"][0], expected)
