"""The self-supervised methods `ContrastiveModel` trains, one module each, and their registry.

Importing this package registers the built-in methods; a new method is one
module: a `ContrastiveAlgorithm` subclass passed to `register_algorithm`.
"""

from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.registry import (
    algorithm_names,
    get_algorithm,
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

# isort: on

__all__ = [
    "BYOL",
    "DINO",
    "BarlowTwins",
    "ContrastiveAlgorithm",
    "Forward",
    "MoCoV3",
    "SimCLR",
    "SimSiam",
    "VICReg",
    "algorithm_names",
    "get_algorithm",
    "register_algorithm",
    "unregister_algorithm",
]
