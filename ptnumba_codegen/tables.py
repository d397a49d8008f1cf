"""The one lookup every class-keyed table of the package uses."""

from __future__ import annotations

from collections.abc import Mapping


def mro_lookup(table: Mapping[type, object], op, default=None):
    """``table``'s row for ``op``: the row of the nearest class along ``type(op).__mro__``
    (a subclass takes its base's row unless it has its own), else ``default``."""
    for cls in type(op).__mro__:
        if cls in table:
            return table[cls]
    return default
