"""What a self-supervised method is to `ContrastiveModel`: its heads, forward pass and loss."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import keras

from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, mlp_projector

if TYPE_CHECKING:  # The driver imports this module; it is named here for the hints only.
    from tensorflow_similarity.models.contrastive import ContrastiveModel


class Forward(NamedTuple):
    """What one forward pass of the two views gives the training step.

    Attributes:
        loss: This replica's share of the global loss (a scalar).
        projection: The first view's projection, for the `proj_std` monitor.
        prediction: The first view's prediction, for `pred_std`, or `None`.
    """

    loss: Any
    projection: Any
    prediction: Any = None


class ContrastiveAlgorithm:
    """A self-supervised method `ContrastiveModel` trains: heads, forward pass, default loss.

    A method is a subclass that sets the class attributes below, overrides
    what differs from the defaults, and is registered with
    `register_algorithm`; `ContrastiveModel(..., algorithm=name)` and
    `create_contrastive_model(backbone, name)` then find it by `name`, and a
    saved model records only that name. The instances are stateless: the
    networks and their variables belong to the model.

    The defaults: a projector built from `projector` (see `build_projector`),
    no predictor, and a forward pass that minimises the loss of the two
    views' projections, `loss(z1, z2)` (with a predictor passed in, SimSiam's
    symmetric `prediction_forward`).

    Attributes:
        name: The lower-case name the registry, the factory and saved models
            use, e.g. `"simclr"`.
        title: The name as the paper writes it, for messages. Defaults to
            `name`.
        projector: The paper's projector, sized for a 2048-d representation.
        concat_views: What the paper's reference implementation did with
            `concat_views=None`: `True` runs both views as one batch (batch
            norm normalises over both), `False` one call per view.
        has_predictor: Whether the method puts a predictor on the projector.
    """

    name: ClassVar[str]
    title: ClassVar[str | None] = None
    projector: ClassVar[ProjectorSpec]
    concat_views: ClassVar[bool] = False
    has_predictor: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def display_name(self) -> str:
        """`title`, or `name` when the class sets none."""
        return self.title or self.name

    def default_loss(self) -> keras.losses.Loss:
        """Returns the paper's loss, used when `compile` is given none."""
        raise NotImplementedError(f"{type(self).__name__} must define default_loss().")

    def projector_widths(self, input_dim: int, projector_width: str = "scaled") -> tuple[int, int]:
        """The default `(hidden_dim, output_dim)` of the projector: see `ProjectorSpec.widths`."""
        return self.projector.widths(input_dim, projector_width)

    def build_projector(
        self,
        input_dim: int,
        hidden_layers: int | None = None,
        hidden_dim: int | None = None,
        output_dim: int | None = None,
        sync_bn: bool | SyncBatchNormPlugin = False,
        name: str = "projector",
        *,
        projector_width: str = "scaled",
        activation: Any = "relu",
    ) -> keras.Model:
        """Builds the paper's projector, with the widths left `None` from `projector_widths`.

        Args:
            input_dim: Width of the backbone's representation.
            hidden_layers: Number of hidden layers; `None` keeps the paper's.
            hidden_dim: Hidden width; `None`: see `projector_width`.
            output_dim: Output width; `None`: see `projector_width`.
            sync_bn: `False`, `True` or a `SyncBatchNormPlugin`.
            name: Model name. Defaults to `"projector"`.
            projector_width: `"scaled"` (default) or `"paper"`.
            activation: Activation of the hidden layers. Defaults to `"relu"`.

        Returns:
            A Functional model `[batch, input_dim] -> [batch, output_dim]`.

        Raises:
            ValueError: For an unknown `projector_width` or a non-positive width.
        """
        default_hidden, default_output = self.projector_widths(input_dim, projector_width)
        spec = ProjectorSpec(
            hidden_layers=self.projector.hidden_layers if hidden_layers is None else hidden_layers,
            hidden_dim=default_hidden if hidden_dim is None else hidden_dim,
            output_dim=default_output if output_dim is None else output_dim,
            output_bn=self.projector.output_bn,
        )
        return mlp_projector(input_dim, spec, sync_bn, name, activation)

    def build_predictor(
        self,
        input_dim: int,
        hidden_dim: int | None = None,
        sync_bn: bool | SyncBatchNormPlugin = False,
    ) -> keras.Model | None:
        """Builds the predictor on `input_dim`-wide projections; `None` for a method without."""
        del input_dim, hidden_dim, sync_bn
        return None

    def check_heads(self, projector: keras.Model, predictor: keras.Model | None) -> None:
        """Raises `ValueError` if the heads cannot train this method (checked before building)."""
        del projector, predictor

    def forward(
        self, model: ContrastiveModel, view1: Any, view2: Any, loss: Any, training: bool
    ) -> Forward:
        """Runs the two views through `model`'s networks and applies `loss` to them.

        Args:
            model: The `ContrastiveModel` (its `backbone`, `projector`,
                `predictor`, and `encode_views`, which applies its
                `concat_views` choice).
            view1: The first views of the batch.
            view2: The second views.
            loss: The loss to apply, called as Keras losses are,
                `loss(target, prediction)`.
            training: Whether the networks run in training mode.

        Returns:
            A `Forward`: this replica's share of the loss and the monitored
            outputs.
        """
        z1, z2 = self.project(model, view1, view2, training)
        if model.predictor is not None:
            return self.prediction_forward(model, z1, z2, loss, training)
        return Forward(loss(z1, z2), z1)

    @staticmethod
    def project(model: ContrastiveModel, view1: Any, view2: Any, training: bool) -> tuple:
        """Returns the two views' projections: the backbone, then the projector."""
        h1, h2 = model.encode_views(view1, view2, model.backbone, training)
        return model.encode_views(h1, h2, model.projector, training)

    @staticmethod
    def prediction_forward(
        model: ContrastiveModel, z1: Any, z2: Any, loss: Any, training: bool
    ) -> Forward:
        """SimSiam's symmetric loss: each view's prediction regresses the other's projection."""
        p1, p2 = model.encode_views(z1, z2, model.predictor, training)
        return Forward(0.5 * (loss(z2, p1) + loss(z1, p2)), z1, p1)
