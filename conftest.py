"""Collection of the package's docstring examples (`--doctest-modules`, see pyproject.toml).

To collect its examples, pytest imports every module of `tensorflow_similarity`. This file is
loaded before `tests/conftest.py` and must not import TensorFlow (that one configures the logical
CPU devices, which must exist before TensorFlow initialises), so it looks packages up without
importing them. It leaves out the modules whose import or examples need an optional package
that is not installed: the test extra installs them all, so CI collects every module.
"""

from __future__ import annotations

import importlib.util

# Modules (globs relative to this folder) and the optional packages they need.
_OPTIONAL = {
    "tensorflow_similarity/architectures/backbone.py": ("keras_cv",),
    "tensorflow_similarity/cli/*.py": ("matplotlib", "sklearn"),
    "tensorflow_similarity/datasets/glyphs.py": ("matplotlib",),
    "tensorflow_similarity/datasets/image_data.py": ("sklearn",),
    "tensorflow_similarity/search/faiss_search.py": ("faiss",),
    "tensorflow_similarity/search/milvus_search.py": ("pymilvus", "milvus_lite"),
    "tensorflow_similarity/visualization/*.py": ("matplotlib", "PIL"),
}

collect_ignore_glob = [
    pattern
    for pattern, packages in _OPTIONAL.items()
    if any(importlib.util.find_spec(package) is None for package in packages)
]
# A method registered when its module is imported: only its own tests import it (and
# unregister it after), so that collecting doctests does not leave it in every process's
# registry, where the docs' tests would find a method the package does not have.
collect_ignore = ["tests/cli/one_module_method.py"]
