"""``DoctorGauges``: the doctor's findings under prefixes an application names, as
OpenTelemetry instruments fed by scans (``zk.diagnose``) run in the background.

The scans run one after another in one task the monitor owns (a ``Detached``, as the
client's session loop: no cancel scope stays open between ``__aenter__`` and
``__aexit__``), at least ``every`` seconds apart; ``refresh()`` asks for one now and joins
it with every other caller waiting for it. The instruments' callbacks run in the metric
reader's thread and only read the last results, which the scans replace whole (never
mutated in place), so a callback sees one scan's values or the next's, never a mix.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import anyio
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from aiozklock import __version__
from aiozklock._client import ZooKeeperClient, session_of
from aiozklock._doctor._defaults import HOLD_WARNING, LEFTOVER_AGE, QUEUE_WARNING
from aiozklock._doctor._diagnose import options
from aiozklock._doctor._model import Diagnosis
from aiozklock._exceptions import AiozklockError, InvalidArgument, UsageError, short_repr
from aiozklock._wire._loop import Detached
from aiozklock._wire._validation import positive_seconds

# The name it has always logged under (the observability page gives it for filtering).
log = logging.getLogger("aiozklock._otel_doctor")

EVERY = 60.0  # seconds from the end of one scan to the start of the next
SCAN_TIMEOUT = 30.0  # seconds a scan of one prefix may take before it counts as failed
STOP_BOUND = 1.0  # seconds __aexit__ waits for the cancelled scan task
PREFIX = "aiozklock.prefix"
KIND = "aiozklock.finding.kind"
OUTCOME = "aiozklock.outcome"


@dataclass(frozen=True, slots=True)
class _Reading:
    """What the instruments show for one prefix: the last successful diagnosis (None
    before the first) and the ``time.monotonic()`` it ended (the monitor's start before)."""

    diagnosis: Diagnosis | None
    since: float


class _Shown:
    """What one monitor shows, shared by the monitor (which writes it) and the instruments
    of its meter provider (whose callbacks read it, in the metric reader's thread): its
    ``prefixes``, and ``readings``, each prefix's ``_Reading``, replaced whole by each scan
    (never mutated in place)."""

    __slots__ = ("prefixes", "readings")

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes
        self.readings: dict[str, _Reading] = {}


class _Instruments:
    """The instruments of one meter provider, shared by every monitor reporting to it: the
    SDK keeps the callbacks of the first observable instrument of a name and drops a later
    one's, so each is made once, and its callback reads what every running monitor shows."""

    def __init__(self, provider: metrics.MeterProvider) -> None:
        meter = metrics.get_meter("aiozklock", __version__, meter_provider=provider)
        self.shown: tuple[_Shown, ...] = ()  # replaced whole: read by other threads
        self.scans = meter.create_counter(
            "aiozklock.doctor.scans", unit="{scan}", description="Doctor scans, by outcome"
        )
        meter.create_observable_up_down_counter(
            "aiozklock.doctor.findings",
            [self._findings],
            unit="{finding}",
            description="Findings of the last successful doctor scan, by kind",
        )
        gauges: list[tuple[str, str, Callable[[Diagnosis], float]]] = [
            ("longest_hold", "Seconds the oldest holder had held", lambda d: d.longest_hold),
            ("longest_wait", "Seconds the oldest waiter had waited", lambda d: d.longest_wait),
            ("scan.duration", "Seconds the last successful scan took", lambda d: d.elapsed),
        ]
        for name, description, value in gauges:
            meter.create_observable_gauge(
                f"aiozklock.doctor.{name}",
                [self._of_each(value)],
                unit="s",
                description=f"{description}, at the last successful doctor scan",
            )
        meter.create_observable_gauge(
            "aiozklock.doctor.scan.age",
            [self._ages],
            unit="s",
            description="Seconds since the last successful doctor scan (or the monitor's start)",
        )

    def _all_readings(self) -> Iterator[tuple[str, _Reading]]:
        for shown in self.shown:
            yield from shown.readings.items()

    def _findings(self, _: CallbackOptions) -> Iterator[Observation]:
        for prefix, reading in self._all_readings():
            if reading.diagnosis is not None:
                for kind, count in reading.diagnosis.counts.items():
                    yield Observation(count, {PREFIX: prefix, KIND: kind.value})

    def _of_each(
        self, value: Callable[[Diagnosis], float]
    ) -> Callable[[CallbackOptions], Iterator[Observation]]:
        def observe(_: CallbackOptions) -> Iterator[Observation]:
            for prefix, reading in self._all_readings():
                if reading.diagnosis is not None:
                    yield Observation(value(reading.diagnosis), {PREFIX: prefix})

        return observe

    def _ages(self, _: CallbackOptions) -> Iterator[Observation]:
        now = time.monotonic()
        for prefix, reading in self._all_readings():
            yield Observation(now - reading.since, {PREFIX: prefix})

    def add(self, shown: _Shown) -> None:
        """Report what a monitor shows; ``InvalidArgument`` if another running monitor
        already reports one of its prefixes here (both would write one series)."""
        with _LOCK:
            taken = {prefix for other in self.shown for prefix in other.prefixes}
            if clash := sorted(taken.intersection(shown.prefixes)):
                raise InvalidArgument(
                    f"another running DoctorGauges reports {', '.join(clash)} to this meter "
                    "provider: give each prefix to one monitor, or each monitor its own "
                    "meter_provider"
                )
            self.shown = (*self.shown, shown)

    def remove(self, shown: _Shown) -> None:
        with _LOCK:
            self.shown = tuple(other for other in self.shown if other is not shown)


_LOCK = threading.Lock()  # several event loops (threads) may start monitors
_SHARED: weakref.WeakKeyDictionary[metrics.MeterProvider, _Instruments] = (
    weakref.WeakKeyDictionary()
)


def _instruments(provider: metrics.MeterProvider | None) -> _Instruments:
    """The instruments of ``provider`` (None: the global one), made on first use."""
    provider = provider if provider is not None else metrics.get_meter_provider()
    with _LOCK:
        made = _SHARED.get(provider)
        if made is None:
            made = _SHARED[provider] = _Instruments(provider)
        return made


class DoctorGauges:
    """The doctor's findings under ``prefixes``, as OpenTelemetry instruments, kept fresh by
    scans in the background: ``async with DoctorGauges(zk, ["/locks"]):``.

    Each scan is ``zk.diagnose(prefix)`` of every prefix in turn (with ``hold_warning``,
    ``queue_warning`` and ``leftover_age``); the first starts on entering, the next
    ``every`` seconds after one ends (a floor: scans never overlap, however long one takes),
    and ``refresh()`` asks for one now. A scan of a prefix that fails (ZooKeeper
    unavailable, no answer within ``timeout`` seconds) is logged as a WARNING and counted,
    and its prefix keeps the last successful scan's values (``aiozklock.doctor.scan.age``
    tells how old they are); the monitor goes on. Leaving the ``async with`` stops it
    within about a second, even if cancelled, and its series disappear.

    The instruments (see ``aiozklock.otel``) belong to ``meter_provider`` (None: the global
    one), made when the first monitor of that provider starts; their callbacks read the
    last results and do no I/O. Nothing is made or started before ``async with``.

    Raises ``InvalidArgument`` (nothing started) if ``zk`` is not a ``ZooKeeperClient``,
    ``prefixes`` is not a non-empty collection of distinct absolute paths (a single string
    is refused), ``every`` or ``timeout`` is not a positive number of seconds, a threshold
    is one ``zk.diagnose`` refuses, or ``meter_provider`` is not a ``MeterProvider``.
    """

    def __init__(
        self,
        zk: ZooKeeperClient,
        prefixes: Iterable[str],
        *,
        every: float = EVERY,
        timeout: float = SCAN_TIMEOUT,
        meter_provider: metrics.MeterProvider | None = None,
        hold_warning: float = HOLD_WARNING,
        queue_warning: int = QUEUE_WARNING,
        leftover_age: float = LEFTOVER_AGE,
    ) -> None:
        if not isinstance(zk, ZooKeeperClient):
            raise InvalidArgument(f"zk must be a ZooKeeperClient, not {short_repr(zk)}")
        if isinstance(prefixes, str | bytes) or not isinstance(prefixes, Iterable):
            raise InvalidArgument(
                f"prefixes must be a list of paths, e.g. ['/locks'], not {short_repr(prefixes)}"
            )
        given = [options(p, hold_warning, queue_warning, leftover_age) for p in prefixes]
        self.prefixes: tuple[str, ...] = tuple(option.prefix for option in given)
        if not self.prefixes or len(set(self.prefixes)) < len(self.prefixes):
            raise InvalidArgument(
                f"prefixes must be distinct paths, at least one: {short_repr(list(self.prefixes))}"
            )
        self.every = positive_seconds("every", every)
        self.timeout = positive_seconds("timeout", timeout)
        if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
            raise InvalidArgument(
                f"meter_provider must be a MeterProvider, not {short_repr(meter_provider)}"
            )
        self._limits = given[0].limits
        self._zk = zk
        self._provider = meter_provider
        self._shown = _Shown(self.prefixes)  # what the instruments read
        self._state: Literal["new", "running", "stopped"] = "new"
        self._instruments: _Instruments | None = None
        self._worker: Detached[None] | None = None
        self._begun = self._ended = 0  # scan rounds begun, ended
        self._asked: anyio.Event | None = None  # set by refresh(): a round, now
        self._round_end: anyio.Event | None = None  # set when a round ends (or on stop)

    @property
    def latest(self) -> dict[str, Diagnosis]:
        """The last successful diagnosis of each prefix scanned successfully so far."""
        readings = self._shown.readings
        return {p: r.diagnosis for p, r in readings.items() if r.diagnosis is not None}

    async def __aenter__(self) -> DoctorGauges:
        """Start reporting and scanning; returns the monitor. Raises ``UsageError`` if
        entered twice, ``ClientClosed`` if ``zk`` is not connected, ``InvalidArgument`` if
        another running monitor reports one of the prefixes to the same meter provider."""
        if self._state != "new":
            raise UsageError("a DoctorGauges can be entered only once")
        session_of(self._zk)  # not connected, or another event loop: before anything
        instruments = _instruments(self._provider)
        instruments.add(self._shown)
        started = time.monotonic()
        self._shown.readings = {prefix: _Reading(None, started) for prefix in self.prefixes}
        for prefix in self.prefixes:  # both series exist from the start, for rate()s
            for outcome in ("ok", "error"):
                instruments.scans.add(0, {PREFIX: prefix, OUTCOME: outcome})
        self._instruments = instruments
        self._asked, self._round_end = anyio.Event(), anyio.Event()
        self._state = "running"
        self._worker = Detached(self._run, name="aiozklock doctor gauges")
        await self._worker.wait_started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop: the series disappear at once; a scan in progress is cancelled and waited
        for at most about a second (shielded). Raises nothing; the body's exception, if
        any, passes unchanged."""
        if self._state != "running":
            return
        self._state = "stopped"
        if self._instruments is not None:
            self._instruments.remove(self._shown)
        if self._round_end is not None:
            self._round_end.set()  # refresh() callers: stopped
        if self._worker is not None:
            await self._worker.stop(STOP_BOUND)

    async def refresh(self) -> None:
        """Scan every prefix now: returns once a round of scans begun after this call has
        ended (callers meanwhile share it; a round in progress is not doubled, it ends
        first). A failed scan is logged and counted as in the background, not raised.

        Raises ``UsageError`` if the monitor is not running (or stops meanwhile)."""
        wanted = self._begun + 1
        while self._ended < wanted:
            if self._state != "running" or self._asked is None or self._round_end is None:
                raise UsageError("the DoctorGauges is not running: use 'async with' it")
            if self._begun < wanted:  # not begun yet: ask (once begun, asking again
                self._asked.set()  # would ask for one more round)
            await self._round_end.wait()

    async def _run(self, started: Callable[[None], None]) -> None:
        started(None)
        while True:
            self._asked = anyio.Event()  # a refresh() from now on asks for the next round
            self._begun += 1
            for prefix in self.prefixes:
                await self._scan(prefix)
            self._ended += 1
            ended, self._round_end = self._round_end, anyio.Event()
            if ended is not None:
                ended.set()
            with anyio.move_on_after(self.every):
                await self._asked.wait()

    async def _scan(self, prefix: str) -> None:
        limits = self._limits
        error: Exception | None = None
        with anyio.move_on_after(self.timeout):
            try:
                diagnosis = await self._zk.diagnose(
                    prefix,
                    hold_warning=limits.hold_warning,
                    queue_warning=limits.queue_warning,
                    leftover_age=limits.leftover_age,
                )
            except Exception as exc:  # logged and counted: the monitor goes on
                error = exc
            else:
                reading = _Reading(diagnosis, time.monotonic())
                self._shown.readings = {**self._shown.readings, prefix: reading}
                self._count(prefix, "ok")
                return
        self._count(prefix, "error")
        why = f"no answer within {self.timeout:g} s"
        if error is not None:
            why = f"{type(error).__name__}: {error}"
        log.warning(
            "aiozklock: the doctor's scan of %s failed (%s); its gauges keep the last "
            "successful scan's values",
            prefix,
            why,
            # Our own errors (unavailable, closed) in one line; anything else is a bug.
            exc_info=None if isinstance(error, AiozklockError) else error,
        )

    def _count(self, prefix: str, outcome: str) -> None:
        if self._instruments is not None:
            self._instruments.scans.add(1, {PREFIX: prefix, OUTCOME: outcome})


__all__ = ("DoctorGauges",)
