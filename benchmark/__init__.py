"""The benchmarks behind `benchmark/results/REPORT.md`, one module or folder per question.

Run from the repository root, each as `python -m benchmark.<question>` (or
`python -m benchmark.<question>.<script>` where a question has several); a full
run writes its JSON and markdown to `benchmark/results/`, and
`python -m benchmark.report` assembles `REPORT.md` from them. Shared helpers are
in `benchmark/common.py`.
"""
