__version__ = "0.1.0"
# Bump whenever generated code changes for the same graph and policy: it is part of
# every cache key, so kernels compiled by an older generator are never reused.
GENERATOR_VERSION = 1
