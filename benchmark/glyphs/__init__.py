"""What the `tfsim train` jobs' default runs reach on the package's glyphs.

`python -m benchmark.glyphs.runs` (both jobs, before and after training, against raw
pixels) and `python -m benchmark.glyphs.ssl_length` (the self-supervised job by length
of run) write `glyphs_runs.*` and `glyphs_ssl_length.*` to `benchmark/results`;
`report.py` renders the report's section on the digits the jobs trained on before.
"""
