"""The servers ``benchmarks/bench_gateways.py`` puts in front of one upstream, one process each."""
