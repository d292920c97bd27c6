"""Loading what a config names by import path (``"package.module:name"``): tools,
reward functions."""

from __future__ import annotations

import importlib
from typing import Any

from .errors import PluginError

__all__ = ["load_object"]


def load_object(path: str, *, field: str) -> Any:
    """The object a ``"package.module:name"`` import path names (``name`` may be dotted).

    Raises:
        PluginError: the path is malformed, the module does not import, or it has no
            such name; the message names ``field``.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f'{field}: expected "package.module:name", got {path!r}')
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised while importing
        raise PluginError(f"{field}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"{field}: {module_name!r} has no {attr!r}") from None
    return obj
