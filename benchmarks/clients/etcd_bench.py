"""etcd's own lock service (``v3lockpb.Lock``), driven from asyncio (benchmark peer).

A session here is what Go's ``concurrency.Session`` is: one gRPC channel (aetcd's
``Client``, over ``grpc.aio``) and one lease, kept alive by a task. A lock is etcd's server-side
``Lock``/``Unlock`` RPC pair: ``Lock(name, lease)`` runs ``concurrency.Mutex.Lock`` inside
the server (a transaction puts ``name/<lease>`` and reads the first-created key of the
prefix; a waiter waits, server-side, for the deletion of every older key: fair, ordered by
revision) and answers once held; ``Unlock(key)`` deletes the key. One RPC each: the client
makes two requests per cycle, however many sessions wait.

aetcd ships no ``v3lock`` messages and its ``Client.lock`` is a client-side transaction loop
(a new lease per try, a watch on the one key, every waiter retrying at each release: not
fair), so the two messages are described here and called on aetcd's channel. ``hosts`` is
``HOST:PORT[,HOST:PORT...]`` (the members' client URLs); session ``i`` talks to member
``i % members``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import aetcd
from aetcd.rpc import rpc_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from benchmarks.clients.aiozklock_bench import contend
from benchmarks.common import (
    SESSION_TIMEOUT,
    Gate,
    Params,
    RequestCount,
    Result,
    per_request_cycles,
    request_paths,
    timed_async_cycles,
)

Scenario = Callable[[Params, Gate], Coroutine[Any, Any, Result]]


def _v3lock_messages() -> tuple[Any, Any, Any, Any]:
    """etcd's ``v3lock.proto`` messages (LockRequest, LockResponse, UnlockRequest,
    UnlockResponse), built on aetcd's ``rpc.proto`` (for ``ResponseHeader``)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("v3lock.proto")
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name="v3lock.proto", package="v3lockpb", dependency=[rpc_pb2.DESCRIPTOR.name]
        )
        field = descriptor_pb2.FieldDescriptorProto
        header = ("header", 1, field.TYPE_MESSAGE, ".etcdserverpb.ResponseHeader")
        shapes = {
            "LockRequest": [("name", 1, field.TYPE_BYTES, ""), ("lease", 2, field.TYPE_INT64, "")],
            "LockResponse": [header, ("key", 2, field.TYPE_BYTES, "")],
            "UnlockRequest": [("key", 1, field.TYPE_BYTES, "")],
            "UnlockResponse": [header],
        }
        for name, fields in shapes.items():
            message = proto.message_type.add(name=name)
            for field_name, number, kind, type_name in fields:
                added = message.field.add(
                    name=field_name, number=number, type=kind, label=field.LABEL_OPTIONAL
                )
                if type_name:
                    added.type_name = type_name
        pool.Add(proto)
    names = ("LockRequest", "LockResponse", "UnlockRequest", "UnlockResponse")
    classes = [
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v3lockpb.{n}")) for n in names
    ]
    return classes[0], classes[1], classes[2], classes[3]


LockRequest, LockResponse, UnlockRequest, UnlockResponse = _v3lock_messages()


class EtcdSession:
    """One gRPC channel to one member and one lease kept alive (TTL: the session timeout
    of every client), and the count of the gRPC requests it sent, by method."""

    def __init__(self, endpoint: str) -> None:
        host, _, port = endpoint.rpartition(":")
        self.client = aetcd.Client(host=host, port=int(port))
        self.requests: Counter[str] = Counter()
        self.lease_id = 0
        self._keeper: asyncio.Task[None] | None = None
        self._lock: Any = None
        self._unlock: Any = None

    async def start(self) -> EtcdSession:
        await self.client.connect()
        lease = await self.client.lease(int(SESSION_TIMEOUT))
        self.requests["LeaseGrant"] += 1
        self.lease_id = lease.id
        channel = self.client.channel
        self._lock = channel.unary_unary(
            "/v3lockpb.Lock/Lock",
            request_serializer=LockRequest.SerializeToString,
            response_deserializer=LockResponse.FromString,
        )
        self._unlock = channel.unary_unary(
            "/v3lockpb.Lock/Unlock",
            request_serializer=UnlockRequest.SerializeToString,
            response_deserializer=UnlockResponse.FromString,
        )
        self._keeper = asyncio.create_task(self._keep_alive())
        return self

    async def _keep_alive(self) -> None:
        while True:  # a third of the TTL, as Go's clientv3 does
            await asyncio.sleep(SESSION_TIMEOUT / 3)
            await self.client.refresh_lease(self.lease_id)
            self.requests["LeaseKeepAlive"] += 1

    async def lock(self, name: bytes) -> bytes:
        self.requests["Lock"] += 1
        response = await self._lock(LockRequest(name=name, lease=self.lease_id))
        key: bytes = response.key
        return key

    async def unlock(self, key: bytes) -> None:
        self.requests["Unlock"] += 1
        await self._unlock(UnlockRequest(key=key))

    async def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        try:
            await self.client.revoke_lease(self.lease_id)
        finally:
            await self.client.close()


class EtcdLock:
    """``async with`` holds etcd's lock ``name`` for the session's lease."""

    def __init__(self, session: EtcdSession, name: str) -> None:
        self._session = session
        self._name = name.encode()
        self._key: bytes | None = None

    async def __aenter__(self) -> None:
        self._key = await self._session.lock(self._name)

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._key is not None
        key, self._key = self._key, None
        await self._session.unlock(key)


def endpoints(params: Params) -> list[str]:
    return [host.strip() for host in params.hosts.split(",") if host.strip()]


async def open_sessions(stack: AsyncExitStack, params: Params, count: int) -> list[EtcdSession]:
    """``count`` sessions, session ``i`` on member ``i % members``, closed with ``stack``."""
    members = endpoints(params)
    sessions = []
    for i in range(count):
        session = await EtcdSession(members[i % len(members)]).start()
        stack.push_async_callback(session.close)
        sessions.append(session)
    return sessions


async def uncontended(params: Params, gate: Gate) -> Result:
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(stack, params, 1)
        count = RequestCount(sessions, gate)
        result = await timed_async_cycles(EtcdLock(sessions[0], params.path), params, gate)
        return {**result, "requests": count.stop()}


async def contended(params: Params, gate: Gate) -> Result:
    """``sessions`` sessions (each its own channel and lease), one task each, on one lock."""
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(stack, params, params.sessions)
        count = RequestCount(sessions, gate)
        # One list per session: how evenly the grants went round (fairness) is kept too.
        loops: list[tuple[Any, list[tuple[int, int]]]] = [
            (EtcdLock(session, params.path), []) for session in sessions
        ]
        counter = await contend(loops, params, gate)
        return {
            "intervals": [interval for _, intervals in loops for interval in intervals],
            "per_session": [len(intervals) for _, intervals in loops],
            "counter": counter,
            "requests": count.stop(),
        }


async def requests(params: Params, gate: Gate) -> Result:
    """One session (one channel, one lease), ``concurrency`` tasks, each on its own lock
    name (etcd's mutex key is ``name/<lease>``: distinct names, distinct keys)."""
    async with AsyncExitStack() as stack:
        (session,) = await open_sessions(stack, params, 1)
        count = RequestCount([session], gate)
        locks = [EtcdLock(session, path) for path in request_paths(params)]
        result = await per_request_cycles(locks, params, gate)
        return {**result, "requests": count.stop()}


SCENARIOS: dict[str, Scenario] = {
    "uncontended": uncontended,
    "contended": contended,
    "requests": requests,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return asyncio.run(partial(SCENARIOS[scenario], params, gate)())
