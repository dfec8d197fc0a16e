"""The benchmarks' one library: ``base`` (paths, databases, trees, facts, result files),
``drains`` (one drain round of each system), ``pairs`` (interleaved-pair statistics),
``dataset`` (a large table generated server-side) and ``ourside`` (run inside a tree)."""
