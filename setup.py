"""Packaging for tensorflow-similarity (Keras 3 rebuild)."""

from setuptools import find_packages, setup

with open("README.md", encoding="utf-8") as f:
    long_description = f.read()

# TensorFlow is an extra, not a hard requirement: pip cannot tell the GPU wheel
# (`tensorflow`) from the CPU wheel (`tensorflow-cpu`), so a hard dependency on
# either would install the other on top of a user's existing setup.
TF_MIN = "2.16"

# keras-hub 0.32's requirements less tensorflow-text. keras-hub requires
# tensorflow-text for its text tokenizers, and tensorflow-text requires the
# `tensorflow` wheel, so on `tensorflow-cpu` pip would add a second TensorFlow.
# The vision backbones never import it (keras-hub imports it lazily), so this
# extra declares the rest and keras-hub itself is installed without
# dependencies: `pip install --no-deps "keras-hub~=0.32.0"` (see the README).
KERAS_HUB_REQUIRES = [
    "keras>=3.15",
    "absl-py",
    "regex",
    "rich",
    "kagglehub!=1.0.1",
    "kagglesdk==0.1.28",
    "sentencepiece<0.2.2",
    "tokenizers",
]

# The documentation site (`mkdocs build --strict`, run by .ci/run): MkDocs 1.6 for its
# generated pages (docs/_hooks), the Material theme, and mkdocstrings' Python handler.
DOCS_REQUIRES = [
    "mkdocs>=1.6",
    "mkdocs-material>=9.5",
    "mkdocstrings[python]>=0.26",
]

setup(
    name="tensorflow-similarity",
    version="0.18.0.dev0",
    description="Metric and self-supervised learning for Keras 3 with exact "
    "synchronised batch normalisation under tf.distribute.",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache License 2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["tensorflow_similarity", "tensorflow_similarity.*"]),
    install_requires=[
        "keras>=3.4",
        "numpy>=1.23",
        "packaging>=21",
    ],
    extras_require={
        "tensorflow": [f"tensorflow>={TF_MIN}"],
        "tensorflow-cpu": [f"tensorflow-cpu>={TF_MIN}"],
        "tensorflow-and-cuda": [f"tensorflow[and-cuda]>={TF_MIN}"],
        "keras-hub": KERAS_HUB_REQUIRES,
        "cli": ["scikit-learn>=1.2", "matplotlib>=3.6"],
        "viz": ["matplotlib>=3.6", "umap-learn>=0.5"],
        # FaissSearch; the package imports without it.
        "faiss": ["faiss-cpu>=1.7.4"],
        # MilvusSearch: pymilvus reaches a Milvus server; milvus-lite runs one in-process on a
        # local file. The package imports without them.
        "milvus": ["pymilvus>=3.0", "milvus-lite>=3.2"],
        "pandas": ["pandas>=1.5"],
        "docs": DOCS_REQUIRES,
        "test": [
            "pytest>=7",
            "pytest-timeout>=2.1",
            "pytest-xdist>=3.5",
            "ruff>=0.5",
            "scikit-learn>=1.2",
            "matplotlib>=3.6",
            "keras-cv>=0.9",
            *KERAS_HUB_REQUIRES,
            "nbclient>=0.10",
            "nbformat>=5.9",
            "ipykernel>=6",
            "faiss-cpu>=1.7.4",
            "pymilvus>=3.0",
            "milvus-lite>=3.2",
            "pandas>=1.5",
            # Runs the Python blocks of the README and docs/ (tests/docs).
            "sybil>=9",
            *DOCS_REQUIRES,
        ],
    },
    # The `tfsim` command's entry point, outside the package: it quiets TensorFlow's log
    # before importing the package (see tfsim.py).
    py_modules=["tfsim"],
    entry_points={"console_scripts": ["tfsim=tfsim:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Intended Audience :: Science/Research",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
