"""`python -m tensorflow_similarity` runs the `tfsim` command.

The package is imported first, and with it TensorFlow, whose start-up log is
then printed as TensorFlow prints it: the `tfsim` script (or `python -m
tfsim`) hides it (see the `tfsim` module).
"""

from tensorflow_similarity.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
