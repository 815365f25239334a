"""``aiozklock.otel``: metrics and spans, read back with the real OpenTelemetry SDK (in-memory
metric reader and span exporter, providers passed explicitly: no global state)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aiozklock
from aiozklock import SessionState
from aiozklock.otel import Telemetry, parent_label
from aiozklock.testing import FaultProxy
from tests.conftest import ClientFactory, wait_for_queue

pytestmark = [pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
LOCK = {"aiozklock.recipe": "lock", "aiozklock.lock.name": "/locks/orders/*"}


@dataclass
class Recorded:
    """A ``Telemetry`` wired to in-memory SDK readers, and what they hold."""

    telemetry: Telemetry
    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter
    tracer_provider: TracerProvider

    def points(self, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """The data points of metric ``name``, by their attributes."""
        data = self.reader.get_metrics_data()
        found: dict[frozenset[tuple[str, Any]], Any] = {}
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[frozenset((point.attributes or {}).items())] = point
        return found

    def point(self, name: str, attributes: dict[str, Any]) -> Any:
        return self.points(name)[frozenset(attributes.items())]

    def spans(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == "aiozklock.acquire"]


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(meter_provider=meter_provider, tracer_provider=tracer_provider)
    yield Recorded(telemetry, reader, exporter, tracer_provider)
    meter_provider.shutdown()
    tracer_provider.shutdown()


async def test_a_lock_cycle_records_wait_hold_acquisitions_and_a_span(
    recorded: Recorded, open_client: ClientFactory
) -> None:
    zk = await open_client(telemetry=recorded.telemetry)
    tracer = recorded.tracer_provider.get_tracer("test")
    tokens = []
    with anyio.fail_after(10):
        with tracer.start_as_current_span("request") as request:
            for order in (157, 158):  # two orders, one series: /locks/orders/*
                async with zk.lock(f"/locks/orders/{order}") as lock:
                    tokens.append(lock.fencing_token)
    wait = recorded.point("aiozklock.lock.wait", LOCK)
    hold = recorded.point("aiozklock.lock.hold", LOCK)
    assert (wait.count, hold.count) == (2, 2)
    assert wait.sum >= 0
    assert hold.sum >= 0
    assert recorded.point("aiozklock.lock.acquisitions", LOCK).value == 2
    assert list(recorded.points("aiozklock.lock.wait")) == [frozenset(LOCK.items())]
    assert recorded.points("aiozklock.lock.timeouts") == {}
    spans = recorded.spans()
    assert [s.attributes["aiozklock.lock.paths"] for s in spans if s.attributes] == [
        ("/locks/orders/157",),
        ("/locks/orders/158",),
    ]
    for span, token in zip(spans, tokens, strict=True):
        assert span.attributes is not None
        assert span.attributes["aiozklock.outcome"] == "acquired"
        assert span.attributes["aiozklock.fencing_token"] == token
        assert span.attributes["aiozklock.queue.ahead"] == 0
        assert span.attributes["aiozklock.recipe"] == "lock"
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id


async def test_a_timeout_is_counted_and_a_waiter_knows_its_queue_position(
    recorded: Recorded, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    observed = await open_client(telemetry=recorded.telemetry)
    path = "/locks/orders/9"
    holder = zk.lock(path)

    async def wait_for_the_lock() -> None:
        async with observed.lock(path):
            pass

    with anyio.fail_after(10):
        await holder.acquire()
        with pytest.raises(aiozklock.LockTimeout):
            await observed.lock(path).acquire(timeout=0.2)
        assert recorded.point("aiozklock.lock.timeouts", LOCK).value == 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_the_lock)
            # The timed-out attempt's delete is not awaited: listed from its own session (its
            # requests are ordered), the second node is the waiter's, not the old one.
            await wait_for_queue(observed, path, 2)
            await holder.release()
    timeout_span, acquired_span = recorded.spans()
    assert timeout_span.attributes is not None
    assert acquired_span.attributes is not None
    assert timeout_span.attributes["aiozklock.outcome"] == "timeout"
    assert acquired_span.attributes["aiozklock.outcome"] == "acquired"
    assert acquired_span.attributes["aiozklock.queue.ahead"] == 1
    assert recorded.point("aiozklock.lock.acquisitions", LOCK).value == 1
    assert recorded.point("aiozklock.lock.wait", LOCK).count == 1  # granted ones only


async def test_a_loss_and_the_session_changes_are_counted(
    recorded: Recorded, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    zk = await open_client(proxy, telemetry=recorded.telemetry, loss_policy="suspended")
    reconnected = anyio.Event()
    zk.add_listener(
        lambda change: reconnected.set() if change.state is SessionState.CONNECTED else None
    )

    async def hold_while_the_connection_drops() -> None:
        async with zk.lock("/locks/orders/1"):
            await proxy.drop_all()
            await anyio.sleep_forever()  # the loss cancels the body

    with anyio.fail_after(10):
        with pytest.raises(aiozklock.LockLost):
            await hold_while_the_connection_drops()
        await reconnected.wait()
    losses = recorded.point("aiozklock.lock.losses", {**LOCK, "aiozklock.loss.cause": "suspended"})
    assert losses.value == 1
    assert recorded.point("aiozklock.lock.hold", LOCK).count == 1
    changes = {
        (dict(key)["aiozklock.session.previous_state"], dict(key)["aiozklock.session.state"]): (
            point.value
        )
        for key, point in recorded.points("aiozklock.session.state_changes").items()
    }
    assert changes == {
        ("connecting", "connected"): 1,
        ("connected", "suspended"): 1,
        ("suspended", "connected"): 1,
    }
    reconnects = recorded.points("aiozklock.session.reconnects")
    assert {k: p.value for k, p in reconnects.items()} == {
        frozenset({("aiozklock.session.previous_state", "suspended")}): 1
    }


async def test_path_label_and_recipe_kinds(recorded: Recorded, open_client: ClientFactory) -> None:
    reader = InMemoryMetricReader()
    exact = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]), path_label=str)
    zk = await open_client(telemetry=exact)
    with anyio.fail_after(10):
        async with zk.multi_lock(["/b/y", "/a/x"]):
            pass
        async with zk.election("/elections/leader"):
            pass
        async with zk.lock("/locks/fixed", fair=False):
            pass
        rw = zk.rw_lock("/locks/rw")
        async with rw.read_lock:
            pass
        async with rw.write_lock:
            pass
        async with zk.semaphore("/sem/s", max_leases=2):
            pass
    mine = Recorded(exact, reader, recorded.exporter, recorded.tracer_provider)
    series = {
        (dict(key)["aiozklock.recipe"], dict(key)["aiozklock.lock.name"])
        for key in mine.points("aiozklock.lock.acquisitions")
    }
    assert series == {
        ("multi_lock", "/a/x,/b/y"),
        ("election", "/elections/leader"),
        ("nonfair_lock", "/locks/fixed"),
        ("read_lock", "/locks/rw"),
        ("write_lock", "/locks/rw"),
        ("semaphore", "/sem/s"),
    }
    assert parent_label("/locks/orders/157") == "/locks/orders/*"
    assert parent_label("/top") == "/*"


async def test_bad_telemetry_arguments_are_refused_before_any_traffic(hosts: str) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="telemetry"):
        aiozklock.connect(hosts, telemetry=object())  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="path_label"):
        Telemetry(path_label="/locks")  # type: ignore[arg-type]


CHILD = """
import sys, anyio, aiozklock

async def main():
    async with aiozklock.connect(sys.argv[1]) as zk:
        async with zk.lock("/locks/orders/1"):
            pass
        assert zk.lock("/locks/orders/1")._observer is None

anyio.run(main, backend=sys.argv[2])
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


async def test_without_telemetry_opentelemetry_is_never_imported(
    hosts: str, anyio_backend: str
) -> None:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-c", textwrap.dedent(CHILD), hosts, anyio_backend],
            cwd=ROOT,
            stderr=subprocess.STDOUT,
        )
    assert done.stdout.decode().strip() == "[]"


async def test_every_factory_tells_its_description_entry_s_kind(open_client: ClientFactory) -> None:
    """Each object a factory makes, in every variant (fair or not, each ``compat`` layout),
    is told to telemetry once, as its recipe's description entry's kind: together, exactly
    ``RECIPE_KINDS``."""
    from aiozklock._recipes._traits import RECIPE_KINDS

    told: list[str] = []

    class Kinds(Telemetry):
        def recipe(self, kind: str, paths: tuple[str, ...]) -> Any:
            told.append(kind)
            return super().recipe(kind, paths)

    zk = await open_client(telemetry=Kinds())
    kept = [  # referenced, so that the client keeps them (it keeps them weakly)
        zk.lock("/k/lock"),
        zk.lock("/k/lock"),  # the same object: not told again
        zk.lock("/k/kazoo", compat="kazoo"),
        zk.lock("/k/nonfair", fair=False),
        zk.multi_lock(["/k/m1", "/k/m2"]),
        zk.election("/k/election"),
        zk.election("/k/election-kazoo", compat="kazoo"),
        zk.rw_lock("/k/rw"),
        zk.rw_lock("/k/rw-kazoo", compat="kazoo"),
        zk.lease_lock("/k/lease", 5),
        zk.semaphore("/k/sem", 2),
        zk.semaphore("/k/sem-kazoo", 2, compat="kazoo"),
        zk.semaphore("/k/sem-curator", 2, compat="curator"),
    ]
    assert kept[0] is kept[1]
    assert told == [
        "lock",
        "lock",
        "nonfair_lock",
        "multi_lock",
        "election",
        "election",
        "write_lock",
        "read_lock",
        "write_lock",
        "read_lock",
        "lease_lock",
        "semaphore",
        "semaphore",
        "semaphore",
    ]
    assert set(told) == set(RECIPE_KINDS)


def test_every_recipe_kind_is_documented() -> None:
    """The ``aiozklock.recipe`` label's values: one list (``RECIPE_KINDS``, every description
    entry's kinds), and the docs page and the module docstring naming each."""
    from aiozklock._recipes._traits import RECIPE_KINDS

    page = (ROOT / "docs" / "observability.md").read_text()
    for kind in RECIPE_KINDS:
        assert f"`{kind}`" in page
        assert f"``{kind}``" in (aiozklock.otel.__doc__ or "")
