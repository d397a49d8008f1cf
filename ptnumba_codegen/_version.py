import hashlib
from pathlib import Path

__version__ = "0.1.0"
# Bump whenever generated code changes for the same graph and policy. It is part of every
# cache key, together with a digest of the generator's own source, so a kernel compiled
# by another generator is never reused from PyTensor's disk cache.
GENERATOR_VERSION = 25


def _source_digest() -> str:
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


GENERATOR_DIGEST = _source_digest()
