"""Loading typed configs from TOML, with errors that name the bad field and value.

Every config in the project is a msgspec Struct with ``forbid_unknown_fields=True``
and bounds in ``Annotated[..., msgspec.Meta(...)]``.  msgspec's own messages say
*where* (``$.rollout.max_turns``) and *what type*, but not the bad value nor the
bound on a type mismatch; :func:`convert` rewrites them as

    rollout.max_turns: expected int >= 1, got "five"
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

from ..errors import ConfigError

T = TypeVar("T")

_PATH_RE = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_SEGMENT_RE = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]")


def load_toml(path: str | Path, cls: type[T]) -> T:
    """Read a TOML file and convert it to ``cls``.

    Raises:
        ConfigError: the file is missing, is not valid TOML, or a field is invalid.
    """
    return convert(read_toml(path), cls)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file's tables, unconverted.

    Raises:
        ConfigError: the file is missing or is not valid TOML.
    """
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def convert(data: Any, cls: type[T], *, prefix: str = "") -> T:
    """``msgspec.convert`` with errors rewritten to name the field and the bad value.

    ``prefix`` is prepended to paths (for a section converted on its own).
    """
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe(str(exc), data, cls, prefix)) from None


def to_toml(config: msgspec.Struct) -> str:
    """The resolved config as TOML (written into every run directory).  Unset
    optional fields (``None``) are left out: TOML has no null."""
    return msgspec.toml.encode(_drop_none(msgspec.to_builtins(config))).decode()


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _describe(message: str, data: Any, cls: type, prefix: str) -> str:
    match = _PATH_RE.search(message)
    if match is None:
        return f"{prefix or 'config'}: {_lower_first(message)}"
    keys: list[str | int] = [
        name or int(index)
        for name, index in _SEGMENT_RE.findall(match["path"])
    ]
    dotted = ".".join([prefix] * bool(prefix) + [_render_key(k) for k in keys]).replace(".[", "[")
    head = message[: match.start()]
    if head.startswith("Object contains unknown field"):
        return f"{dotted}: {_lower_first(head)} (check the spelling; see the documented fields)"
    if head.startswith("Object missing required field"):
        return f"{dotted}: {_lower_first(head)}"
    found, value = _lookup(data, keys)
    declared = _declared(cls, keys)
    if found and isinstance(value, dict) and declared is not None and isinstance(_unwrap(declared), mi.StructType):
        # A table where a table belongs is no type error: the struct's own check
        # (``__post_init__``) failed, and its message names the fields already.
        return head
    expected = _render_type(declared) if declared is not None else _lower_first(head)
    got = f", got {_render_value(value)}" if found else ""
    return f"{dotted}: expected {expected}{got}"


def _render_key(key: str | int) -> str:
    return f"[{key}]" if isinstance(key, int) else key


def _lookup(data: Any, keys: list[str | int]) -> tuple[bool, Any]:
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, data


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _declared(cls: type, keys: list[str | int]) -> mi.Type | None:
    """The type (with bounds) declared at ``keys`` inside ``cls``."""
    info: mi.Type = mi.type_info(cls)
    for key in keys:
        info = _unwrap(info)
        if isinstance(info, mi.StructType) and isinstance(key, str):
            fields = {f.encode_name: f.type for f in info.fields}
            if key not in fields:
                return None
            info = fields[key]
        elif isinstance(info, (mi.ListType, mi.TupleType, mi.VarTupleType)) and isinstance(key, int):
            info = info.item_type  # type: ignore[union-attr]
        elif isinstance(info, mi.DictType):
            info = info.value_type
        else:
            return None
    return info


def _unwrap(info: mi.Type) -> mi.Type:
    # Optional sections (`X | None`) are looked through to the struct inside.
    if isinstance(info, mi.UnionType):
        rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return info


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _render_type(info: mi.Type) -> str:
    if isinstance(info, mi.UnionType):
        return " or ".join(_render_type(t) for t in info.types)
    if isinstance(info, mi.LiteralType):
        return "one of " + ", ".join(_render_value(v) for v in info.values)
    names = {
        mi.IntType: "int", mi.FloatType: "float", mi.StrType: "string", mi.BoolType: "bool",
        mi.ListType: "array", mi.DictType: "table", mi.StructType: "table", mi.NoneType: "none",
    }
    name = names.get(type(info), type(info).__name__.removesuffix("Type").lower())
    bounds = [
        f"{sym} {getattr(info, attr)}"
        for attr, sym in _BOUNDS
        if getattr(info, attr, None) is not None
    ]
    for attr, sym in (("min_length", "length >="), ("max_length", "length <=")):
        if getattr(info, attr, None) is not None:
            bounds.append(f"{sym} {getattr(info, attr)}")
    return " ".join([name, " and ".join(bounds)]).strip()
