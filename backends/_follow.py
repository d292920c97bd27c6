"""A pool that follows another pool's weight syncs over the same servers (a rollout
shard's pool in another process, moved by the trainer's :class:`~backends.WeightSync`)."""

from __future__ import annotations

from ._errors import WeightSyncError
from ._pool import ServerPool
from ._pool_server import PoolServer

__all__ = ["follow_versions"]


def follow_versions(pool: ServerPool) -> None:
    """Make ``pool`` follow a :class:`WeightSync` of another pool over the same
    servers (a rollout shard's pool, moved by the trainer's sync): a server that was
    down re-enters ``pool``'s rotation only once it reports the version ``pool`` was
    told (:meth:`ServerPool.set_weight_version`), i.e. once the sync's own pool has
    loaded it; until then each poll leaves it out.  Before the first version
    (``weight_version == 0``: the servers hold their initial weights) any server is
    taken back, as :meth:`WeightSync.on_server_back` does before its first sync.
    Installs itself as ``pool.on_server_back``.
    """

    async def check(server: PoolServer) -> None:
        expected = pool.weight_version
        if expected and await server.admin.weight_version() != str(expected):
            raise WeightSyncError(f"server {server.index} is not on version {expected} yet")

    pool.on_server_back = check
