"""Process-wide runtime: the thread-chunk runtime, the shared BLAS pool, pool rules and the
allocator."""
