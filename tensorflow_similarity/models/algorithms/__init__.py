"""The self-supervised methods `ContrastiveModel` trains, one module each, and their registry.

Importing this package registers the built-in methods; a new method is one
module: a `ContrastiveAlgorithm` subclass passed to `register_algorithm`. An
installed package declares its methods under the entry-point group
`ENTRY_POINT_GROUP`, which `load_entry_points` imports.
"""

from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.context import STATISTIC_RULES, MethodContext
from tensorflow_similarity.models.algorithms.registry import (
    ENTRY_POINT_GROUP,
    algorithm_names,
    get_algorithm,
    load_entry_points,
    register_algorithm,
    unregister_algorithm,
)

# isort: off
# Registration order is the order the names are listed in (`--help`, error messages).
from tensorflow_similarity.models.algorithms.simsiam import SimSiam
from tensorflow_similarity.models.algorithms.simclr import SimCLR
from tensorflow_similarity.models.algorithms.barlow import BarlowTwins
from tensorflow_similarity.models.algorithms.vicreg import VICReg
from tensorflow_similarity.models.algorithms.byol import BYOL
from tensorflow_similarity.models.algorithms.mocov3 import MoCoV3
from tensorflow_similarity.models.algorithms.dino import DINO
from tensorflow_similarity.models.algorithms.mocov2 import MoCoV2
from tensorflow_similarity.models.algorithms.swav import SwAV

# isort: on

__all__ = [
    "ENTRY_POINT_GROUP",
    "STATISTIC_RULES",
    "BYOL",
    "DINO",
    "BarlowTwins",
    "ContrastiveAlgorithm",
    "Forward",
    "MethodContext",
    "MoCoV2",
    "MoCoV3",
    "SimCLR",
    "SimSiam",
    "SwAV",
    "VICReg",
    "algorithm_names",
    "get_algorithm",
    "load_entry_points",
    "register_algorithm",
    "unregister_algorithm",
]
