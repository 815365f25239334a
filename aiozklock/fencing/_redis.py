"""A fence that Redis enforces: a value is written with its writer's fencing token, in one Lua
script that refuses a token older than the one stored (``aiozklock[redis]``, redis-py's
``redis.asyncio``).

Layout: one hash per fenced key, fields ``value`` and ``token`` (the token as 19 zero-padded
decimal digits). One key per fence, so a script touches a single slot (Redis Cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiozklock._exceptions import FenceMissing, InvalidArgument, StaleFencingToken
from aiozklock.fencing._floor import read_floor
from aiozklock.fencing._tokens import check_token

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster
    from redis.commands.core import AsyncScript

    from aiozklock._client import ZooKeeperClient

__all__ = ["RedisFence"]

# A token (0..2**63-1, checked by _tokens.check_token) has at most 19 decimal digits.
_DIGITS = 19

# Lua numbers are doubles, exact only to 2**53, and a zxid has 63 bits: tonumber() on a
# whole token would make 2**60 and 2**60 + 1 equal. The tokens are fixed-width decimal
# strings, compared as two halves of at most 10 digits (< 2**34 each), which are exact.
_OLDER = """
local function older(a, b)
  local a_high, b_high = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  return a_high < b_high or (a_high == b_high
    and tonumber(string.sub(a, 11)) < tonumber(string.sub(b, 11)))
end
local function stored_token()
  local stored = redis.call('HGET', KEYS[1], 'token')
  if stored then
    if #stored ~= 19 or string.find(stored, '%D') then
      return nil, redis.error_reply('aiozklock fence: ' .. KEYS[1] .. ' has a malformed token')
    end
  elseif redis.call('EXISTS', KEYS[1]) == 1 then
    return nil, redis.error_reply('aiozklock fence: ' .. KEYS[1] .. ' is a hash without a token')
  end
  return stored, nil
end
"""

# Replies: {1, ...} accepted; {0, stored} refused, a newer token is stored; {2} refused, the
# key is missing. A missing key fails closed: it may have been evicted, flushed or lost in a
# failover, and an older token than the one it held would be accepted (issue 30). Only
# recover() creates it again, at a floor read from ZooKeeper.
_CHECK = (
    _OLDER
    + """
local stored, failed = stored_token()
if failed then return failed end
if not stored then return {2} end
if older(ARGV[1], stored) then return {0, stored} end
"""
)

# KEYS[1] the fence's hash; ARGV[1] the token (19 digits), ARGV[2] the value.
SET_SCRIPT = (
    _CHECK
    + """
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1}
"""
)

# A fenced read: the token is registered (older holders are refused from now on), the value
# is left as it is and returned.
ADVANCE_SCRIPT = (
    _CHECK
    + """
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'value')}
"""
)

# The token stays (a tombstone): a stale writer must still be refused after the delete.
DELETE_SCRIPT = (
    _CHECK
    + """
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, redis.call('HDEL', KEYS[1], 'value')}
"""
)

# ARGV[1] the floor (19 digits): the token becomes max(stored, floor), the key is created if
# missing; the value, if any, stays. Returns {1, the token in force}.
RECOVER_SCRIPT = (
    _OLDER
    + """
local stored, failed = stored_token()
if failed then return failed end
if stored and not older(stored, ARGV[1]) then return {1, stored} end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, ARGV[1]}
"""
)


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidArgument(f"a fenced key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidArgument("a fenced key must not be empty")
    return key


def _encode_token(token: object) -> str:
    """The token as the fixed-width decimal string the scripts compare."""
    return f"{check_token(token):0{_DIGITS}d}"


def _decode_token(raw: bytes | str) -> int:
    return int(raw)


class RedisFence:
    """Values in Redis that only the current holder of a lock can overwrite.

    ``fence = RedisFence(redis)`` over a ``redis.asyncio.Redis`` (or ``RedisCluster``)
    client; every method is one Lua script or one command, atomic on the server. A key
    holds a hash with the fields ``value`` and ``token`` (the token as 19 zero-padded
    decimal digits): do not write it by other means. Tokens are compared exactly, whatever
    their size (Lua's numbers are doubles, exact only up to 2**53; a zxid has 63 bits).

    A key must exist before it is written: :meth:`recover` creates it at a floor read from
    ZooKeeper. A missing key refuses every token (``FenceMissing``): Redis cannot tell a key
    never written from one it evicted, flushed or lost in a failover, and accepting a token
    there would let a stale holder in. The fence keeps no expiry: an expired key would be a
    missing one.

    Constructing it sends nothing. Raises ``InvalidArgument`` if ``redis`` is not an
    asyncio client of redis-py (a synchronous ``redis.Redis`` would block the event loop; a
    pipeline only queues commands), and ``ImportError`` if redis-py is not installed
    (``pip install aiozklock[redis]``).
    """

    def __init__(self, redis: Redis | RedisCluster) -> None:
        try:
            from redis.asyncio import Redis, RedisCluster
            from redis.asyncio.client import Pipeline
        except ImportError as exc:  # pragma: no cover - the caller passed some client
            raise ImportError(
                "RedisFence needs redis-py (redis.asyncio): pip install 'aiozklock[redis]'"
            ) from exc
        # A pipeline is a Redis too, but it only queues: the script's answer would not come.
        if not isinstance(redis, (Redis, RedisCluster)) or isinstance(redis, Pipeline):
            raise InvalidArgument(
                "RedisFence needs a redis.asyncio client (redis.asyncio.Redis or "
                f"RedisCluster), not {type(redis).__module__}.{type(redis).__qualname__}"
            )
        self._redis = redis
        # register_script only hashes the text: EVALSHA, and SCRIPT LOAD once on NOSCRIPT.
        self._set: AsyncScript = redis.register_script(SET_SCRIPT)
        self._delete: AsyncScript = redis.register_script(DELETE_SCRIPT)
        self._advance: AsyncScript = redis.register_script(ADVANCE_SCRIPT)
        self._recover: AsyncScript = redis.register_script(RECOVER_SCRIPT)

    def __repr__(self) -> str:
        return f"<RedisFence {self._redis!r}>"

    async def set(self, key: str, value: bytes | str, token: int) -> None:
        """Write ``value`` at ``key`` with ``token``, unless the key holds a newer token.

        An equal token is accepted (the same holder writing again). Raises
        ``StaleFencingToken`` (``newer`` is the stored token) when the stored token is
        greater, and nothing is written; ``FenceMissing`` (a ``StaleFencingToken``) when
        the key does not exist, whatever the token: the fence fails closed, since a key
        evicted, flushed or lost in a failover no longer knows the newest token (call
        :meth:`recover`; a new key is created the same way); ``InvalidArgument``, before
        any command, for a key that is not a non-empty str, a value that is not bytes or
        str, or a token that is not an int in 0..2**63-1; redis-py's errors
        (``ConnectionError``, ``ResponseError`` when ``key`` holds something else than a
        fence) pass through.
        """
        key = _check_key(key)
        if not isinstance(value, (bytes, str)):
            kind = type(value).__name__
            raise InvalidArgument(f"a fenced value must be bytes or str, not {kind}")
        encoded = _encode_token(token)
        reply = await self._set(keys=[key], args=[encoded, value])
        self._raise_if_refused(key, token, reply)

    async def delete(self, key: str, token: int) -> bool:
        """Remove the value at ``key``, unless the key holds a newer token; the token stays.

        The hash keeps ``token`` (a tombstone), so a stale writer is still refused later;
        removing the key itself (``DEL``) is safe only once no holder of an older token can
        write again. Returns whether there was a value. Raises like :meth:`set`.
        """
        key = _check_key(key)
        encoded = _encode_token(token)
        reply = await self._delete(keys=[key], args=[encoded])
        self._raise_if_refused(key, token, reply)
        return bool(reply[1])

    async def advance(self, key: str, token: int) -> bytes | str | None:
        """A fenced read: register ``token`` at ``key`` without changing the value, and
        return the value (None if there is none).

        Call it first thing after a grant, before a read-modify-write: from then on a holder
        of an older token is refused, so no stale write can land between this read and
        this holder's first ``set`` (``PostgresFence.advance`` is the same step in
        PostgreSQL). Raises like :meth:`set`.
        """
        key = _check_key(key)
        reply = await self._advance(keys=[key], args=[_encode_token(token)])
        self._raise_if_refused(key, token, reply)
        value: bytes | str | None = reply[1]
        return value

    async def get(self, key: str) -> tuple[bytes | str, int] | None:
        """``(value, token)`` stored at ``key``, or None when there is no value (never
        written, or deleted). The value is bytes, or str if the client decodes responses.

        Raises ``InvalidArgument`` for a key that is not a non-empty str, before any
        command, and ``ValueError`` if ``key`` is a hash that is not a fence."""
        key = _check_key(key)
        value, token = await self._redis.hmget(key, ["value", "token"])
        if token is None:
            if value is not None:
                raise ValueError(f"{key!r} is a hash with a value but no fencing token")
            return None
        if value is None:
            return None
        return value, _decode_token(token)

    async def recover(self, key: str, zk: ZooKeeperClient, *, under: str = "/") -> int:
        """Re-create the fence of ``key`` at a floor read from ZooKeeper now, after its key
        was lost (``FenceMissing``), or for a key never written; returns the token now in
        force (the floor, or a newer token already stored).

        ``zk`` must be a client of the ensemble that grants the tokens. The floor is the
        zxid of a write made now through it (a probe node created and deleted under
        ``under`` in one ``multi``; it leaves no node): greater than every token ZooKeeper
        had issued before, so a holder granted before the call is refused from then on, and
        must leave its lock and acquire it again; a later grant's token is above the floor.
        The key's token becomes the greater of the floor and the stored token: it is never
        lowered, and the value, if any, stays. So the call is also safe
        on a key that was not lost, e.g. after a failover to a replica that may hold an
        older token (Redis cannot tell): it fences out everything issued before it.

        Raises ``InvalidArgument`` (nothing sent) for a key that is not a non-empty str, a
        ``zk`` that is not a ``ZooKeeperClient`` or a bad ``under``; ZooKeeper's refusal of
        the probe (``NoNodeError`` if ``under`` does not exist, ``NoAuthError`` if its ACL
        refuses the create), ``SessionExpired`` or ``ClientClosed``; redis-py's errors
        (``ResponseError`` if ``key`` holds something else than a fence).
        """
        key = _check_key(key)
        floor = await read_floor(zk, under)
        reply = await self._recover(keys=[key], args=[_encode_token(floor)])
        return _decode_token(reply[1])

    @staticmethod
    def _raise_if_refused(key: str, token: int, reply: Any) -> None:
        verdict = int(reply[0])
        if verdict == 2:
            raise FenceMissing(key, token)
        if verdict == 0:
            raise StaleFencingToken(key, token, newer=_decode_token(reply[1]))
