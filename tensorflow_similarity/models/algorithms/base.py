"""What a self-supervised method is to `ContrastiveModel`: its heads, forward pass and loss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import keras
import tensorflow as tf

from tensorflow_similarity import augmenters
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms.context import MethodContext
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, build_predictor, mlp_projector
from tensorflow_similarity.models.momentum import assign_on_every_replica


class Forward(NamedTuple):
    """What one forward pass of the two views gives the training step.

    Attributes:
        loss: This replica's share of the global loss (a scalar).
        projection: The first view's projection, for the `proj_std` monitor.
        prediction: The first view's prediction, for `pred_std`, or `None`.
        statistics: A dict of tensors, identical on every replica, that the
            step combines over its micro-batches, each by its rule in the
            method's `statistic_rules`, and hands to `after_update` once per
            optimizer step (DINO's sums of teacher outputs for its centre),
            or `None`.
        monitors: A dict of scalar collapse monitors, each the global
            batch's figure, logged under their names (see
            `ContrastiveAlgorithm.monitor_names`), or `None`.
    """

    loss: Any
    projection: Any
    prediction: Any = None
    statistics: Any = None
    monitors: Any = None


class ContrastiveAlgorithm:
    """A self-supervised method `ContrastiveModel` trains: heads, forward pass, default loss.

    A method is a subclass that sets the class attributes below, overrides
    what differs from the defaults, and is registered with
    `register_algorithm`; `ContrastiveModel(..., algorithm=name)` and
    `create_contrastive_model(backbone, name)` then find it by `name`, and a
    saved model records only that name. The instances are stateless: the
    networks and the method's own variables belong to the model. Everything the
    command line and the docs know of a method is declared here too: its
    default views (`photograph_views`, `glyph_views`), its options for a run
    of a given length (`run_options`), its predictor's ratio, its monitors
    (`monitor_names`) and its row in the docs' table of methods (`paper`,
    `prevents_collapse`, `across_replicas`); `tfsim pretrain --algorithm`
    offers every registered method.

    The method sees the model only through a `MethodContext`, which every
    hook takes: the networks, the options, the optimizer's step and the
    method's own variables (`context.state`, made in `create_state`).

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
        predictor_hidden_ratio: The predictor's default hidden width over the
            projection width (SimSiam a quarter, BYOL and MoCo v3 16).
        predictor_output_bn: The predictor's output batch norm (see
            `mlp_heads.build_predictor`).
        predictor_reason: Why the method needs its predictor, for the error.
        has_key_encoder: Whether the teacher is a key encoder whose forward
            pass goes through `MethodContext.encode_keys` (`teacher_project`
            does), which is what shuffle batch norm (`bn="shuffle"`) needs;
            the model refuses that mode for a method without. BYOL and MoCo
            v3: `True`.
        base_momentum: A momentum teacher's first-step momentum, for a method
            with one (BYOL, MoCo v3, DINO): the model then keeps a copy of
            the backbone and projector that follows the student after each
            optimizer step (see `after_update`). `None` (default): no teacher.
        uses_local_crops: Whether the forward pass takes multi-crop local
            views (DINO); other methods refuse them.
        option_defaults: The method's own options and their defaults (DINO's
            teacher temperatures, ...), set per model with
            `algorithm_options`.
        statistic_rules: How the step combines each `Forward.statistics`
            entry over the micro-batches of an optimizer step: `"sum"` adds
            them (DINO's sums), `"concat"` concatenates them along their first
            axis in micro-batch order, so that rows gathered over the replicas
            come in the order of the step's global batch (a queue's keys).
            An entry without a rule is refused.
        paper: The paper, as the docs' table of methods cites it
            (`"Chen et al., 2020"`).
        prevents_collapse: What keeps the embeddings from collapsing, for
            that table.
        across_replicas: What the method computes across replicas, for that
            table.
    """

    name: ClassVar[str]
    title: ClassVar[str | None] = None
    projector: ClassVar[ProjectorSpec]
    concat_views: ClassVar[bool] = False
    has_predictor: ClassVar[bool] = False
    predictor_hidden_ratio: ClassVar[float] = 0.25
    predictor_output_bn: ClassVar[str | None] = None
    predictor_reason: ClassVar[str] = "it is what breaks the symmetry between the views"
    has_key_encoder: ClassVar[bool] = False
    base_momentum: ClassVar[float | None] = None
    uses_local_crops: ClassVar[bool] = False
    option_defaults: ClassVar[dict[str, Any]] = {}
    statistic_rules: ClassVar[Mapping[str, str]] = {}
    paper: ClassVar[str] = ""
    prevents_collapse: ClassVar[str] = ""
    across_replicas: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def display_name(self) -> str:
        """`title`, or `name` when the class sets none."""
        return self.title or self.name

    @property
    def has_teacher(self) -> bool:
        """Whether the method trains against a momentum teacher (`base_momentum` is set)."""
        return self.base_momentum is not None

    def resolve_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """Returns `option_defaults` updated with `options`, checked.

        Raises:
            ValueError: For an option the method does not have, listing the
                ones it has.
        """
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            known = ", ".join(self.option_defaults) or "none"
            raise ValueError(
                f"{self.display_name} has no option {', '.join(map(repr, unknown))}; "
                f"its algorithm_options are: {known}."
            )
        return {**self.option_defaults, **options}

    def options_in_epochs(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options of `options` that count epochs and are in force (none by default).

        A momentum-teacher model refuses to train on data of unknown length
        when this is not empty, unless `fit` is given `steps_per_epoch`:
        without an epoch's length such options would silently turn off.
        """
        del options
        return {}

    def photograph_views(
        self, image_size: int, seed: int | None = None
    ) -> augmenters.ViewAugmenter:
        """The views of photographs the paper trains on; SimCLR's by default.

        BYOL's and MoCo v3's views are SimCLR's crops, flips, jitter and blur
        (their papers add solarisation to one view); DINO's two global views
        here carry no local crops. `tfsim pretrain` draws its views with this for every data set but
        glyphs (`glyph_views`).

        Args:
            image_size: Side of the square views.
            seed: Seed of the views. Defaults to `None` (random).

        Returns:
            An augmenter `images -> (view1, view2)`: by default
            `augmenters.simclr_augmenter(image_size, seed=seed)`.
        """
        return augmenters.simclr_augmenter(image_size, seed=seed)

    def glyph_views(self, image_size: int, seed: int | None = None) -> augmenters.ViewAugmenter:
        """The views of glyphs (line drawings); `GlyphAugmenter`'s by default.

        A photograph's crops, flips and colour jitter do not suit glyphs: a
        mirrored letter is another letter. `GlyphAugmenter` warps them and
        changes their stroke width instead.

        Args:
            image_size: Side of the square views.
            seed: Seed of the views. Defaults to `None` (random).

        Returns:
            An augmenter `images -> (view1, view2)`.
        """
        return augmenters.GlyphAugmenter(image_size, seed=seed)

    def run_options(self, epochs: int) -> dict[str, Any] | None:
        """The method's `algorithm_options` for a run of `epochs` epochs; `None` by default.

        For options the paper sets in proportion to the run's length (DINO's
        teacher-temperature warm-up). `tfsim pretrain` passes them to
        `create_contrastive_model`.

        Args:
            epochs: The run's epochs.

        Returns:
            A dict of `algorithm_options`, or `None` to keep `option_defaults`.
        """
        del epochs
        return None

    def monitor_names(self) -> tuple[str, ...]:
        """Names of the extra collapse monitors `forward` returns in `Forward.monitors`."""
        return ()

    def create_state(self, context: MethodContext) -> None:
        """Creates the method's own variables with `context.add_state`; none by default.

        Called once, when the model is made (and again when it is loaded, whose
        saved values then replace the initial ones). DINO's centre:
        `context.add_state("dino_center", (prototypes,))`.
        """
        del context

    def adjust_gradients(self, context: MethodContext, gradients: list, variables: list) -> list:
        """Returns the step's gradients as the optimizer should apply them; as given by default.

        Called once per optimizer step, in the replica context, on this
        replica's summed gradients, before `apply_gradients`.
        """
        del context, variables
        return gradients

    def after_update(self, context: MethodContext, statistics: dict[str, Any] | None) -> None:
        """Runs after each optimizer step: moves the teacher towards the student.

        The default, for a method with a teacher, sets each teacher weight to
        `m * teacher + (1 - m) * student` with `m = context.teacher_momentum()`,
        on every replica (`models.momentum.assign_on_every_replica`).
        `statistics` are the step's `Forward.statistics`, each combined over
        its micro-batches by its `statistic_rules` rule.
        """
        del statistics
        if not self.has_teacher:
            return
        momentum = context.teacher_momentum()
        teachers, students = context.teacher_pairs()
        values = [
            tf.cast(momentum, t.dtype) * t + tf.cast(1.0 - momentum, t.dtype) * s
            for t, s in zip(teachers, students, strict=True)
        ]
        assign_on_every_replica(teachers, values)

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
        return self.projector_from_spec(input_dim, spec, sync_bn, name, activation)

    def projector_from_spec(
        self,
        input_dim: int,
        spec: ProjectorSpec,
        sync_bn: bool | SyncBatchNormPlugin,
        name: str,
        activation: Any,
    ) -> keras.Model:
        """Builds the projector of `spec`, its widths resolved; an MLP (`mlp_projector`)."""
        return mlp_projector(input_dim, spec, sync_bn, name, activation)

    def build_predictor(
        self,
        input_dim: int,
        hidden_dim: int | None = None,
        sync_bn: bool | SyncBatchNormPlugin = False,
    ) -> keras.Model | None:
        """Builds the predictor on `input_dim`-wide projections; `None` for a method without.

        Its hidden width is `hidden_dim`, else `predictor_hidden_ratio` times
        `input_dim`; its output batch norm is `predictor_output_bn`'s.
        """
        if not self.has_predictor:
            return None
        hidden_dim = hidden_dim or max(int(input_dim * self.predictor_hidden_ratio), 1)
        return build_predictor(
            input_dim, hidden_dim=hidden_dim, sync_bn=sync_bn, output_bn=self.predictor_output_bn
        )

    def check_heads(self, projector: keras.Model, predictor: keras.Model | None) -> None:
        """Raises `ValueError` if the heads cannot train this method (checked before building).

        By default: a method with a predictor (`has_predictor`) refuses to go
        without one, saying why it needs it (`predictor_reason`).
        """
        del projector
        if self.has_predictor and predictor is None:
            raise ValueError(
                f"{self.display_name} needs a predictor model ({self.predictor_reason}). "
                "Pass predictor=..., or build all heads with "
                f"create_contrastive_model(backbone, {self.name!r})."
            )

    def forward(
        self, context: MethodContext, view1: Any, view2: Any, loss: Any, training: bool
    ) -> Forward:
        """Runs the two views through the context's networks and applies `loss` to them.

        Args:
            context: The model's `MethodContext` (its `backbone`, `projector`,
                `predictor`, and `encode_views`, which applies the model's
                `concat_views` choice).
            view1: The first views of the batch.
            view2: The second views.
            loss: The loss to apply, called as Keras losses are,
                `loss(target, prediction)`.
            training: Whether the networks run in training mode.

        Returns:
            A `Forward`: this replica's share of the loss and the monitored
            outputs.

        It is `loss_of_outputs` of `student_outputs` and `teacher_outputs`.
        A method that keeps this composition and overrides those three hooks
        instead can train with cached embeddings (`chunk_size`), which calls
        them apart; one that overrides `forward` cannot (`splits_forward`).
        """
        student = self.student_outputs(context, view1, view2, training)
        teacher = self.teacher_outputs(context, view1, view2, training)
        return self.loss_of_outputs(context, student, teacher, loss)

    @property
    def splits_forward(self) -> bool:
        """Whether `forward` is `loss_of_outputs` of the per-sample outputs (not overridden).

        Cached-embedding steps (`ContrastiveModel(chunk_size=...)`) need it:
        they run `student_outputs` chunk by chunk, twice, and `loss_of_outputs`
        once on the whole batch's outputs.
        """
        return type(self).forward is ContrastiveAlgorithm.forward

    def student_outputs(
        self, context: MethodContext, view1: Any, view2: Any, training: bool
    ) -> dict[str, Any]:
        """The student's outputs that the loss takes, by name; row `i` from the views' row `i`.

        The default: the projections `z1`, `z2` and, with a predictor, the
        predictions `p1`, `p2`. A cached-embedding step calls it on one
        chunk of the views at a time, so an output's row must depend on the
        same row of the views alone (batch norm excepted: see
        `ContrastiveModel`'s `chunk_size`).
        """
        z1, z2 = self.project(context, view1, view2, training)
        if context.predictor is None:
            return {"z1": z1, "z2": z2}
        p1, p2 = context.encode_views(z1, z2, context.predictor, training)
        return {"z1": z1, "z2": z2, "p1": p1, "p2": p2}

    def teacher_outputs(
        self, context: MethodContext, view1: Any, view2: Any, training: bool
    ) -> dict[str, Any] | None:
        """The teacher's outputs, without gradient: `t1`, `t2` (`teacher_project`); `None` without.

        A cached-embedding step computes them chunk by chunk once, with no
        tape, before the student's chunks.
        """
        if context.teacher_backbone is None:
            return None
        t1, t2 = self.teacher_project(context, view1, view2, training)
        return {"t1": t1, "t2": t2}

    def loss_of_outputs(
        self,
        context: MethodContext,
        student: dict[str, Any],
        teacher: dict[str, Any] | None,
        loss: Any,
    ) -> Forward:
        """The `Forward` of the whole batch's outputs: the loss and the monitored outputs.

        The default: with teacher outputs, BYOL's and MoCo v3's `loss(t2, p1)
        + loss(t1, p2)`; else with predictions, SimSiam's `0.5 * (loss(z2, p1)
        + loss(z1, p2))`; else `loss(z1, z2)`.
        """
        del context
        z1, p1 = student["z1"], student.get("p1")
        if teacher is not None:
            value = loss(teacher["t2"], p1) + loss(teacher["t1"], student["p2"])
            return Forward(value, z1, p1)
        if p1 is not None:
            return Forward(0.5 * (loss(student["z2"], p1) + loss(z1, student["p2"])), z1, p1)
        return Forward(loss(z1, student["z2"]), z1)

    @staticmethod
    def project(context: MethodContext, view1: Any, view2: Any, training: bool) -> tuple:
        """Returns the two views' projections: the backbone, then the projector."""
        h1, h2 = context.encode_views(view1, view2, context.backbone, training)
        return context.encode_views(h1, h2, context.projector, training)

    @staticmethod
    def teacher_project(
        context: MethodContext, view1: Any, view2: Any, training: bool = True
    ) -> tuple:
        """Returns the teacher's projections of the two views, without gradient.

        In training the teacher runs in training mode, as the papers' teachers
        do: its batch norms normalise with the batch's statistics (the global
        batch's when synchronised, a share of it permuted across replicas
        with shuffle batch norm: see `MethodContext.encode_keys`) and update
        their own moving statistics.
        """

        def teacher(v1: Any, v2: Any) -> tuple:
            h1, h2 = context.encode_views(v1, v2, context.teacher_backbone, training)
            return context.encode_views(h1, h2, context.teacher_projector, training)

        t1, t2 = context.encode_keys(teacher, view1, view2, training=training)
        return tf.stop_gradient(t1), tf.stop_gradient(t2)

    def teacher_prediction_forward(
        self, context: MethodContext, view1: Any, view2: Any, loss: Any, training: bool
    ) -> Forward:
        """BYOL's and MoCo v3's pass: each view's prediction against the teacher's other view.

        `loss(t2, p1) + loss(t1, p2)`, with `p` the student's predictions and
        `t` the teacher's projections (no gradient).
        """
        z1, z2 = self.project(context, view1, view2, training)
        p1, p2 = context.encode_views(z1, z2, context.predictor, training)
        t1, t2 = self.teacher_project(context, view1, view2, training)
        return Forward(loss(t2, p1) + loss(t1, p2), z1, p1)

    @staticmethod
    def prediction_forward(
        context: MethodContext, z1: Any, z2: Any, loss: Any, training: bool
    ) -> Forward:
        """SimSiam's symmetric loss: each view's prediction regresses the other's projection."""
        p1, p2 = context.encode_views(z1, z2, context.predictor, training)
        return Forward(0.5 * (loss(z2, p1) + loss(z1, p2)), z1, p1)
