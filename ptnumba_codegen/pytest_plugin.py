"""Old import path of the pytest plugin, kept as an alias for one release:
``-p ptnumba_codegen.pytest_plugin`` still works; the plugin lives in
``ptnumba_codegen.tools.pytest_plugin``."""

from ptnumba_codegen.tools.pytest_plugin import (  # noqa: F401
    pytest_addoption,
    pytest_configure,
    pytest_report_header,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    pytest_testnodedown,
    reapply_pytensor_flags,
)
