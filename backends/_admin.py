"""What every engine's admin adapter shares: one HTTP exchange with our errors, and
the health probe.  ``_vllm`` and ``_sglang`` build their admin calls on these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import msgspec

from ._errors import BadResponse, RequestRejected, ServerUnavailable


async def admin_call(
    http: httpx.AsyncClient, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None
) -> httpx.Response:
    """One admin exchange, httpx's errors translated into ours."""
    try:
        response = await http.request(method, path, json=json, params=params)
    except httpx.TransportError as exc:
        raise ServerUnavailable(f"{http.base_url}{path}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500:
        raise ServerUnavailable(f"{http.base_url}{path}: HTTP {response.status_code}: {response.text[:300]}")
    if response.status_code >= 400:
        raise RequestRejected(f"{http.base_url}{path}: HTTP {response.status_code}: {response.text[:300]}", response.status_code)
    return response


def decode_json(response: httpx.Response) -> Any:
    try:
        return msgspec.json.decode(response.content)
    except msgspec.DecodeError as exc:
        raise BadResponse(f"{response.request.url}: not JSON: {response.content[:200]!r}") from exc


class AdminBase:
    """What every engine's admin adapter shares: the lent client and the health probe."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def health(self) -> bool:
        """True if ``/health`` answers 200; False on any error."""
        try:
            return (await self.http.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False
