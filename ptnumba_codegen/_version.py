import hashlib
from pathlib import Path

__version__ = "0.1.0"
# Bump whenever generated code changes for the same graph and policy. It is part of every
# cache key, together with a digest of the generator's own source, so a kernel compiled
# by another generator is never reused from PyTensor's disk cache.
GENERATOR_VERSION = 30

ROOT = Path(__file__).resolve().parent

# The front ends: command line, benchmarks, demos, the pytest plugin. Nothing the generator
# runs imports them (tests/test_cache.py checks), so they stay out of the source digest:
# editing a benchmark between its cold and its warm process must not turn every cached
# kernel stale (a warm process would recompile the whole model).
FRONT_ENDS = frozenset({"tools", "__main__.py", "pytest_plugin.py"})


def is_front_end(relative: Path) -> bool:
    """Whether the package file at ``relative`` (to the package root) is a front end."""
    return relative.parts[0] in FRONT_ENDS


def generator_sources(root: Path = ROOT) -> list[Path]:
    """The package's ``.py`` files the generated code can depend on, in a fixed order."""
    return [p for p in sorted(root.rglob("*.py")) if not is_front_end(p.relative_to(root))]


def source_digest(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for path in generator_sources(root):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


GENERATOR_DIGEST = source_digest()
