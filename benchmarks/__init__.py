"""SharedOS benchmarks: scripts that print figures (never timed unit tests).

``python -m benchmarks.run`` (``make bench``) runs them all; see
``benchmarks/README.md``.
"""
