"""Other libraries' recipes as peers of ours on one path: Apache Curator (compiled at test
time) and kazoo, each in its own process, and the check of their merged history."""
