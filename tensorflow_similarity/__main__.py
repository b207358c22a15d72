"""`python -m tensorflow_similarity` runs the `tfsim` command."""

from tensorflow_similarity.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
