"""The process runtime: one supervised process and the pieces it is made of.

``SupervisedProcess`` needs trio; ``privileges`` and ``spawn`` do not, and the
command line uses them before trio is imported (see ``supervisor._run``), so
the package exports lazily.

Importing the package means trio is coming: it first defers the modules
trio imports that a supervisor without HTTPS never uses
(``supervisor._deferred.defer_trio_extras``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._deferred import defer_trio_extras

defer_trio_extras()

if TYPE_CHECKING:
    from .process import ProcessEvents as ProcessEvents
    from .process import SupervisedProcess as SupervisedProcess
    from .state import ProcessState as ProcessState

__all__ = ["ProcessEvents", "ProcessState", "SupervisedProcess"]


def __getattr__(name: str) -> Any:
    if name == "ProcessState":
        from . import state

        return state.ProcessState
    if name in __all__:
        from . import process

        return getattr(process, name)
    raise AttributeError(f"module 'supervisor.runtime' has no attribute {name!r}")
