"""The benchmark suite (issue 7): the supervisor as PID 1, side by side with
tini, dumb-init, catatonit and supervisord, measured in the same run.

``python -m benchmarks`` (``make bench``) runs every scenario, writes
``benchmarks/results.json`` and regenerates the table in
``docs/benchmarks.md``; ``--smoke`` runs each once at a tiny size and checks
only that the answers are right (the test suite's use).
"""
