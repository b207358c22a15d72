"""`python -m benchmark.sync_bn`: the benchmark of `benchmark/sync_bn/run.py`."""

from benchmark.sync_bn.run import main

if __name__ == "__main__":
    main()
