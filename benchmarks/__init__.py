"""torchloom's benchmark suite: `make bench` runs `python -m benchmarks.run` and writes BENCHMARKS.md."""
