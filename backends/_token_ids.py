"""A trajectory's growing token ids, kept with their JSON (:class:`TokenIds`).

Each turn of a trajectory sends its whole context as the prompt: ~1K ids at the
first turn, ~4K by the last of rStar2's ~11 turns, and more with longer turns.
Encoding it all again for every request costs ~11 ns an id (~30 us of a 3K-id
turn's CPU, and it grows with the context).  :class:`TokenIds` keeps the JSON of
its ids beside them, extended by each turn's new ids only, so that a request
splices it in (:meth:`TokenIds.json`; made at its first call, so that a backend
that never asks for it pays nothing).  It costs ~7 bytes a token more than the
list alone (``benchmarks/token_ids.py`` measures both).  A compact ``array("i")``
in place of the list was tried: 2.7-3.1x less memory, but converting each id to a C
int and back at the end cost more CPU than the JSON saved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, NoReturn, Self

import msgspec

__all__ = ["TokenIds", "json_ids"]

_encoder: Final = msgspec.json.Encoder()


class TokenIds(list[int]):
    """A list of token ids that only grows (:meth:`extend`), with its JSON array kept
    up to date.

    A ``list``, so any :class:`~backends.TokenBackend` takes it as the prompt it
    is lent; the token clients send :meth:`json` as the request's ids as is.
    Changes other than ``extend`` (and ``+=``) would leave the JSON behind, so they
    raise ``TypeError``; ``+``, slices and ``copy()`` give plain lists.
    """

    __slots__ = ("_json",)

    def __init__(self, ids: Iterable[int] = ()) -> None:
        super().__init__(ids)
        self._json: bytearray | None = None  # made by the first json(): a backend that never asks pays nothing

    def extend(self, ids: Iterable[int]) -> None:
        """Append ``ids``: the JSON, once made, grows by theirs only."""
        ids = ids if isinstance(ids, list) else list(ids)
        if not ids:
            return
        if self._json is None:
            return super().extend(ids)
        new = _encoder.encode(ids)
        super().extend(ids)
        if len(self._json) > 2:  # "[...]" -> "[...," + the new ids' "..]"
            self._json[-1:] = b","
        else:  # "[]"
            del self._json[-1:]
        self._json += memoryview(new)[1:]

    def __iadd__(self, ids: Iterable[int]) -> Self:  # type: ignore[override,misc]
        self.extend(ids)
        return self

    def json(self) -> bytes:
        """The ids as a JSON array, e.g. ``b"[1,2,3]"`` (a copy: the caller may keep it)."""
        if self._json is None:
            self._json = bytearray(_encoder.encode(self))
        return bytes(self._json)

    def _only_extend(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("TokenIds only grows, by extend: its JSON would not follow this change")

    append = insert = pop = remove = clear = sort = reverse = _only_extend  # type: ignore[assignment]
    __setitem__ = __delitem__ = __imul__ = _only_extend  # type: ignore[assignment]


def json_ids(ids: Sequence[int]) -> Sequence[int] | msgspec.Raw:
    """``ids`` as a field of a body msgspec encodes: a :class:`TokenIds`' JSON spliced
    in as is, anything else encoded as usual."""
    return msgspec.Raw(ids.json()) if isinstance(ids, TokenIds) else ids
