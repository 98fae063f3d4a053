"""threadbound's tests; ``tests.support`` holds what they (and the benchmarks) share."""
