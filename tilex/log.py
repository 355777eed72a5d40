"""tilex's log level (``tilex.set_log_level``, TileLang's ``tilelang.set_log_level``): every tilex module logs
under the ``"tilex"`` logger (``tilex.autotuner``, ``tilex.jit.cache``, ...), so its level is the package's."""
from __future__ import annotations

import logging

__all__ = ["logger", "set_log_level"]

logger = logging.getLogger("tilex")

_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def set_log_level(level) -> None:
    """Set the ``"tilex"`` logger's level: a name (``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``,
    ``"CRITICAL"``, any case) or a ``logging`` level number. Raises ValueError for another name, TypeError for
    another type."""
    if isinstance(level, str):
        name = level.strip().upper()
        if name not in _NAMES:
            raise ValueError(f"set_log_level: unknown level {level!r}; use one of {', '.join(_NAMES)} or a number")
        level = getattr(logging, name)
    elif isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"set_log_level: level must be a name or a logging level number, got {level!r}")
    logger.setLevel(level)
