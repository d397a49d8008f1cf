"""Command line: ``python -m ptnumba_codegen {demo,bench} [options]``."""

from __future__ import annotations

import sys

COMMANDS = {
    "demo": ("ptnumba_codegen.tools.demo", "the seed example under stock numba and each policy, plus a speed table"),
    "bench": ("ptnumba_codegen.tools.bench", "side-by-side benchmark table (see `bench --help`)"),
    "explain": ("ptnumba_codegen.explain", "classes, flags and lowering of each kernel of a function (--ir: final IR)"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        lines = [f"  {name:8s} {help_}" for name, (_, help_) in COMMANDS.items()]
        print("usage: python -m ptnumba_codegen COMMAND [options]\n\ncommands:\n" + "\n".join(lines))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    import importlib

    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
