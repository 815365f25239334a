"""``aiozklock.otel.DoctorGauges``: the doctor's findings as OpenTelemetry instruments, read
back with the real SDK (an in-memory metric reader, the provider passed explicitly), on real
ZooKeeper: a deadlock made with events shows and goes, a long holder, a failing scan, the
interval, the refresh, bad arguments and the stop."""

from __future__ import annotations

import itertools
import logging
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import aiozklock
from aiozklock import SessionState
from aiozklock.otel import DoctorGauges, Telemetry
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration
ROOT = Path(__file__).resolve().parent.parent
KINDS = (
    "deadlock",
    "unsafe_mix",
    "long_holder",
    "long_queue",
    "expired_lease",
    "leftover_parent",
    "unreadable",
    "lock_delay",
)


class Metrics:
    """A meter provider with an in-memory reader, and what it reads."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)

    def read(self) -> dict[str, dict[frozenset[tuple[str, Any]], Any]]:
        """Every metric's values (or histogram points), by name, then by attributes."""
        data = self.reader.get_metrics_data()
        found: dict[str, dict[frozenset[tuple[str, Any]], Any]] = {}
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = {
                        frozenset((point.attributes or {}).items()): getattr(point, "value", point)
                        for point in metric.data.data_points
                    }
        return found

    def findings(self, prefix: str) -> dict[str, int]:
        """``aiozklock.doctor.findings`` of ``prefix``, by kind."""
        points = self.read().get("aiozklock.doctor.findings", {})
        by_kind = {dict(key)["aiozklock.finding.kind"]: v for key, v in points.items()}
        assert {dict(key)["aiozklock.prefix"] for key in points} <= {prefix}
        return by_kind

    def gauge(self, name: str, prefix: str) -> float:
        value: float = self.read()[name][frozenset({("aiozklock.prefix", prefix)})]
        return value

    def scans(self, prefix: str, outcome: str) -> int:
        key = frozenset({("aiozklock.prefix", prefix), ("aiozklock.outcome", outcome)})
        count: int = self.read()["aiozklock.doctor.scans"][key]
        return count


@pytest.fixture
def otel() -> Iterator[Metrics]:
    made = Metrics()
    yield made
    made.provider.shutdown()


def only(kind: str, count: int = 1) -> dict[str, int]:
    """Every kind 0 but ``kind``."""
    return {k: count if k == kind else 0 for k in KINDS}


async def test_a_deadlock_shows_on_its_gauge_and_goes_once_resolved(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, otel: Metrics
) -> None:
    one, two = await open_client(), await open_client()
    taken = [anyio.Event(), anyio.Event()]
    give_up = anyio.CancelScope()  # two stops waiting for /dl/a: no more cycle

    async def party_one() -> None:
        async with one.lock("/dl/a"):
            taken[0].set()
            await taken[1].wait()
            async with one.lock("/dl/b"):
                pass

    async def party_two() -> None:
        async with two.lock("/dl/b"):
            taken[1].set()
            await taken[0].wait()
            with give_up:
                async with two.lock("/dl/a"):
                    raise AssertionError("two got /dl/a: no deadlock")
            await anyio.sleep_forever()  # holds /dl/b, waits for nothing

    gauges = DoctorGauges(zk, ["/dl"], every=3600, meter_provider=otel.provider)
    with anyio.fail_after(HANG):
        async with gauges, anyio.create_task_group() as tg:
            tg.start_soon(party_one)
            tg.start_soon(party_two)
            for event in taken:  # the paths exist from then on
                await event.wait()
            await wait_for_queue(zk, "/dl/a", 2)
            await wait_for_queue(zk, "/dl/b", 2)
            await gauges.refresh()
            assert otel.findings("/dl") == only("deadlock")
            assert otel.gauge("aiozklock.doctor.longest_wait", "/dl") >= 0.0
            assert otel.gauge("aiozklock.doctor.longest_hold", "/dl") >= 0.0
            (deadlock,) = gauges.latest["/dl"].findings
            assert deadlock.sessions == tuple(sorted([one.session_id, two.session_id]))

            give_up.cancel()
            await wait_for_children(zk, "/dl/a", lambda children: len(children) == 1)
            await gauges.refresh()
            assert otel.findings("/dl") == only("deadlock", 0)
            assert otel.scans("/dl", "ok") >= 2
            assert otel.scans("/dl", "error") == 0
            tg.cancel_scope.cancel()


async def test_a_long_holder_raises_long_holders_and_the_longest_hold_of_its_prefix(
    zk: aiozklock.ZooKeeperClient, otel: Metrics
) -> None:
    warning = 0.25
    gauges = DoctorGauges(
        zk, ["/held", "/idle"], every=3600, hold_warning=warning, meter_provider=otel.provider
    )
    with anyio.fail_after(HANG):
        async with gauges, zk.lock("/held/a"):
            # Time passing is the point: the server's clock moves as this machine's does.
            await anyio.sleep(2 * warning)
            await gauges.refresh()
            points = otel.read()
    held, idle = ({("aiozklock.prefix", prefix)} for prefix in ("/held", "/idle"))
    assert points["aiozklock.doctor.longest_hold"] == {
        frozenset(held): pytest.approx(gauges.latest["/held"].longest_hold),
        frozenset(idle): 0.0,
    }
    assert gauges.latest["/held"].longest_hold >= 2 * warning
    findings = points["aiozklock.doctor.findings"]
    assert {
        (dict(key)["aiozklock.prefix"], dict(key)["aiozklock.finding.kind"])
        for key, count in findings.items()
        if count
    } == {("/held", "long_holder")}
    assert len(findings) == 2 * len(KINDS)  # every kind of each prefix, 0 included
    assert points["aiozklock.doctor.longest_wait"][frozenset(held)] == 0.0
    assert set(points["aiozklock.doctor.scan.age"]) == {frozenset(held), frozenset(idle)}
    assert points["aiozklock.doctor.scan.duration"][frozenset(held)] > 0.0
    # Stopped: the observed series are gone (the scan counter, a counter, stays).
    assert set(otel.read()) == {"aiozklock.doctor.scans"}


async def test_a_failing_scan_is_counted_keeps_the_last_values_and_the_monitor_goes_on(
    proxy: FaultProxy,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    otel: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watched, other = await open_client(proxy), await open_client()
    connected = anyio.Event()
    watched.add_listener(
        lambda change: connected.set() if change.state is SessionState.CONNECTED else None
    )
    timeout = 2.0  # a failing scan lasts this long; a working one takes milliseconds
    gauges = DoctorGauges(
        watched, ["/f"], every=3600, timeout=timeout, queue_warning=1, meter_provider=otel.provider
    )
    waiting = anyio.CancelScope()

    async def wait_for_the_lock() -> None:
        with waiting:
            async with other.lock("/f/a"):
                pass

    with anyio.fail_after(HANG):
        async with gauges, zk.lock("/f/a"), anyio.create_task_group() as tg:
            tg.start_soon(wait_for_the_lock)
            await wait_for_queue(zk, "/f/a", 2)
            await gauges.refresh()
            assert otel.findings("/f") == only("long_queue")
            assert otel.scans("/f", "ok") >= 1

            proxy.blackhole(True, new="refuse")
            await proxy.drop_all()
            with caplog.at_level(logging.WARNING, logger="aiozklock._otel_doctor"):
                await gauges.refresh()  # fails after `timeout`, and returns
            assert otel.scans("/f", "error") == 1
            assert otel.findings("/f") == only("long_queue")  # kept
            assert otel.gauge("aiozklock.doctor.scan.age", "/f") >= timeout
            (record,) = [r for r in caplog.records if r.name == "aiozklock._otel_doctor"]
            assert record.getMessage() == (
                "aiozklock: the doctor's scan of /f failed (no answer within 2 s); its "
                "gauges keep the last successful scan's values"
            )

            ok = otel.scans("/f", "ok")
            proxy.blackhole(False)
            await connected.wait()
            waiting.cancel()
            await wait_for_children(zk, "/f/a", lambda children: len(children) == 1)
            await gauges.refresh()
            assert otel.scans("/f", "ok") == ok + 1
            assert otel.findings("/f") == only("long_queue", 0)
            assert otel.scans("/f", "error") == 1


async def test_scans_follow_the_interval_as_a_floor(
    proxy: FaultProxy, open_client: ClientFactory, otel: Metrics
) -> None:
    watched = await open_client(proxy)
    proxy.reset_counters()  # connect() reads /zookeeper/config: a getData of its own
    every = 0.2
    # The prefix does not exist: each scan is exactly one getData.
    gauges = DoctorGauges(watched, ["/nothing"], every=every, meter_provider=otel.provider)
    with anyio.fail_after(HANG):
        async with gauges:  # no refresh(): the first scan starts at once, the others follow
            await proxy.wait_for_request(Opcode.GET_DATA, 3)
            assert otel.scans("/nothing", "ok") >= 2
            assert otel.findings("/nothing") == only("deadlock", 0)
    starts = [request.t for request in proxy.requests if request.opcode == Opcode.GET_DATA]
    assert all(b - a >= every * 0.95 for a, b in itertools.pairwise(starts))


async def test_refreshes_at_once_share_rounds_and_scans_never_overlap(
    proxy: FaultProxy, open_client: ClientFactory, otel: Metrics
) -> None:
    watched = await open_client(proxy)
    proxy.reset_counters()  # connect() reads /zookeeper/config: a getData of its own
    gauges = DoctorGauges(watched, ["/nothing"], every=3600, meter_provider=otel.provider)
    with anyio.fail_after(HANG):
        async with gauges:
            await gauges.refresh()
            before = otel.scans("/nothing", "ok")
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(gauges.refresh)
            # Each caller wants the round after the one in progress when it asked: at most
            # two rounds, not five.
            assert otel.scans("/nothing", "ok") - before in (1, 2)
            before = otel.scans("/nothing", "ok")
            for _ in range(3):  # one after another: one round each, none more
                await gauges.refresh()
            assert otel.scans("/nothing", "ok") - before == 3
    assert proxy.count(Opcode.GET_DATA) == otel.scans("/nothing", "ok")


BAD: list[tuple[dict[str, Any], str]] = [
    ({"zk": object()}, "zk must be a ZooKeeperClient"),
    ({"prefixes": "/locks"}, "prefixes must be a list of paths"),
    ({"prefixes": 7}, "prefixes must be a list of paths"),
    ({"prefixes": []}, "at least one"),
    ({"prefixes": ["/a", "/a"]}, "distinct"),
    ({"prefixes": ["locks"]}, "prefix must be absolute"),
    ({"prefixes": [None]}, "prefix must be a str"),
    ({"every": 0}, "every must be a positive"),
    ({"every": -1.0}, "every must be a positive"),
    ({"every": math.nan}, "every must be a positive"),
    ({"every": "60"}, "every must be a number"),
    ({"every": True}, "every must be a number"),
    ({"timeout": 0}, "timeout must be a positive"),
    ({"hold_warning": 0}, "hold_warning"),
    ({"queue_warning": 0}, "queue_warning"),
    ({"leftover_age": -5}, "leftover_age"),
    ({"meter_provider": object()}, "meter_provider must be a MeterProvider"),
]


@pytest.mark.parametrize(("bad", "message"), BAD)
async def test_bad_arguments_are_refused_before_anything_starts(
    zk: aiozklock.ZooKeeperClient, otel: Metrics, bad: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {"zk": zk, "prefixes": ["/locks"], "meter_provider": otel.provider}
    with pytest.raises(aiozklock.InvalidArgument, match=message):
        DoctorGauges(**{**arguments, **bad})
    assert otel.read() == {}  # no instrument made


async def test_misuse_is_refused_clearly(
    zk: aiozklock.ZooKeeperClient, hosts: str, otel: Metrics
) -> None:
    gauges = DoctorGauges(zk, iter(["/a", "/b"]), every=3600, meter_provider=otel.provider)
    assert gauges.prefixes == ("/a", "/b")  # any iterable of paths
    with pytest.raises(aiozklock.UsageError, match="not running"):
        await gauges.refresh()  # before async with
    with anyio.fail_after(HANG):
        async with gauges:
            with pytest.raises(aiozklock.UsageError, match="entered only once"):
                await gauges.__aenter__()
            rival = DoctorGauges(zk, ["/c", "/b"], meter_provider=otel.provider)
            with pytest.raises(aiozklock.InvalidArgument, match="reports /b to this meter"):
                await rival.__aenter__()
            async with DoctorGauges(zk, ["/b"], meter_provider=Metrics().provider):
                pass  # another provider: its own series
            await gauges.refresh()  # the first goes on
            assert otel.scans("/b", "ok") >= 1
        with pytest.raises(aiozklock.UsageError, match="not running"):
            await gauges.refresh()  # after
        with pytest.raises(aiozklock.UsageError, match="entered only once"):
            await gauges.__aenter__()
        async with DoctorGauges(zk, ["/b"], meter_provider=otel.provider):
            pass  # the prefix is free again once the first stopped
        never_connected = aiozklock.connect(hosts)
        with pytest.raises(aiozklock.ClientClosed, match="not connected"):
            await DoctorGauges(never_connected, ["/a"]).__aenter__()


async def test_stopping_is_bounded_even_mid_scan_and_cancelled(
    proxy: FaultProxy,
    open_client: ClientFactory,
    otel: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watched = await open_client(proxy)
    gauges = DoctorGauges(watched, ["/s"], every=3600, timeout=3600, meter_provider=otel.provider)
    proxy.blackhole(True)  # the first scan's request is held: the scan hangs
    with anyio.fail_after(HANG), caplog.at_level(logging.WARNING):
        await gauges.__aenter__()
        await proxy.wait_for_request(Opcode.GET_DATA)
        waiting = anyio.Event()

        async def refresh() -> None:
            waiting.set()  # the refresh below waits from then on, without a yield before
            with pytest.raises(aiozklock.UsageError, match="not running"):
                await gauges.refresh()

        async with anyio.create_task_group() as tg:
            tg.start_soon(refresh)
            await waiting.wait()
            with anyio.CancelScope() as cancelled:
                cancelled.cancel()
                await gauges.__aexit__(None, None, None)  # shielded: stops all the same
    assert not [r for r in caplog.records if "did not end" in r.getMessage()]
    assert set(otel.read()) == {"aiozklock.doctor.scans"}  # the series are gone
    assert otel.scans("/s", "ok") == otel.scans("/s", "error") == 0


CHILD = """
import sys, threading, anyio, aiozklock, aiozklock.otel
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

async def main():
    async with aiozklock.connect(sys.argv[1]) as zk:
        aiozklock.otel.DoctorGauges(zk, ["/locks"])  # made, never entered
        async with zk.lock("/locks/a"):
            pass
        print(",".join(sorted(t.name for t in threading.enumerate())))

anyio.run(main, backend=sys.argv[2])
print(reader.get_metrics_data())  # None: no instrument has a point
"""


async def test_without_async_with_nothing_starts(
    hosts: str, anyio_backend: str, otel: Metrics, open_client: ClientFactory
) -> None:
    zk = await open_client(telemetry=Telemetry(meter_provider=otel.provider))
    DoctorGauges(zk, ["/locks"], meter_provider=otel.provider)  # never entered
    async with zk.lock("/locks/a"):
        pass
    assert not [name for name in otel.read() if name.startswith("aiozklock.doctor.")]
    with anyio.fail_after(HANG):
        done = await anyio.run_process(
            [sys.executable, "-c", CHILD, hosts, anyio_backend],
            cwd=ROOT,
            stderr=subprocess.STDOUT,
        )
    # With the global provider: no thread, no instrument.
    assert done.stdout.decode().splitlines() == ["MainThread", "None"]
