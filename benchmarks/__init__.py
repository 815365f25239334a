"""aiozklock's benchmarks against aiozk, kazoo and Apache Curator: see benchmarks/README.md."""
