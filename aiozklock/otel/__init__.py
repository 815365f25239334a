"""OpenTelemetry metrics and traces for aiozklock (install the ``otel`` extra).

Give a ``Telemetry`` to the client::

    from aiozklock.otel import Telemetry

    async with aiozklock.connect(hosts, telemetry=Telemetry()) as zk:
        ...

``Telemetry()`` uses the global meter and tracer providers (set by your OpenTelemetry SDK
setup); pass ``meter_provider=`` / ``tracer_provider=`` to use others. Only this package
imports OpenTelemetry: a client without ``telemetry`` never loads it.

Metrics (instrumentation scope ``aiozklock``), each with the attributes ``aiozklock.recipe``
(``lock``, ``nonfair_lock``, ``multi_lock``, ``election``, ``lease_lock``, ``read_lock``,
``write_lock``, ``semaphore``) and
``aiozklock.lock.name`` (see ``path_label``):

- ``aiozklock.lock.wait`` (histogram, s): how long each granted acquisition waited.
- ``aiozklock.lock.hold`` (histogram, s): how long each acquisition was held.
- ``aiozklock.lock.acquisitions``, ``aiozklock.lock.timeouts`` (counters).
- ``aiozklock.lock.losses`` (counter), with ``aiozklock.loss.cause``: ``suspended``,
  ``lost``, ``closed`` (the session's state), ``lease``, ``revoked`` (a revocable holder
  asked to let go) or ``layout`` (a peer that cannot order our nodes came after the grant).
- ``aiozklock.lock.local_waiters`` (up-down counter, {task}): the tasks of this process
  queued behind their recipe object's own node, now (the local queue that ZooKeeper does
  not see: one node per object and process).
- ``aiozklock.session.state_changes`` (counter), attributes ``aiozklock.session.state`` and
  ``aiozklock.session.previous_state`` (lower case, e.g. ``suspended``);
  ``aiozklock.session.reconnects`` (counter): back to ``connected`` from ``suspended``
  (same session) or ``lost`` (a new session), in ``aiozklock.session.previous_state``.

Traces: one span ``aiozklock.acquire`` per acquisition attempt (reentrant ones excepted),
a child of the caller's current span.

The doctor's findings, for alerts, come from a ``DoctorGauges`` the application runs
beside its client (``async with DoctorGauges(zk, ["/locks"]):``, scans every 60 s); each
series has the attribute ``aiozklock.prefix``:

- ``aiozklock.doctor.findings`` (up-down counter, the count at the last scan), by
  ``aiozklock.finding.kind`` (``deadlock``, ``unsafe_mix``, ``long_holder``,
  ``long_queue``, ``expired_lease``, ``leftover_parent``, ``unreadable``);
- ``aiozklock.doctor.longest_hold``, ``aiozklock.doctor.longest_wait``,
  ``aiozklock.doctor.scan.duration`` (gauges, s, at the last successful scan);
- ``aiozklock.doctor.scan.age`` (gauge, s): since the last successful scan;
- ``aiozklock.doctor.scans`` (counter), by ``aiozklock.outcome`` (``ok``, ``error``).
"""

from __future__ import annotations

from collections.abc import Callable

from aiozklock._extras import missing_extra

try:
    from opentelemetry import metrics, trace
except ModuleNotFoundError as exc:
    missing_extra(exc, "opentelemetry", "otel", "aiozklock.otel")

from aiozklock import __version__
from aiozklock._exceptions import InvalidArgument
from aiozklock._wire._session import SessionState, StateChange
from aiozklock.otel._doctor import DoctorGauges as DoctorGauges

BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
"""Histogram bucket bounds in seconds, from a fast uncontended grant to an hour-long hold."""
_RECONNECTED_FROM = (SessionState.SUSPENDED, SessionState.LOST)


def parent_label(path: str) -> str:
    """The default ``path_label``: the path with its last segment replaced by ``*``.

    ``"/locks/orders/157"`` gives ``"/locks/orders/*"``: one time series per family of
    locks, however many orders there are. Raises nothing."""
    return path.rpartition("/")[0] + "/*"


class _Instruments:
    """The tracer and the instruments that every recipe object of a ``Telemetry`` shares."""

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None,
        tracer_provider: trace.TracerProvider | None,
    ) -> None:
        meter = metrics.get_meter("aiozklock", __version__, meter_provider=meter_provider)
        self.tracer = trace.get_tracer("aiozklock", __version__, tracer_provider=tracer_provider)
        self.wait = meter.create_histogram(
            "aiozklock.lock.wait",
            unit="s",
            description="Time an acquisition waited until granted",
            explicit_bucket_boundaries_advisory=BUCKETS,
        )
        self.hold = meter.create_histogram(
            "aiozklock.lock.hold",
            unit="s",
            description="Time an acquisition was held until released (or given up, if lost)",
            explicit_bucket_boundaries_advisory=BUCKETS,
        )
        self.acquisitions = meter.create_counter(
            "aiozklock.lock.acquisitions", unit="{acquisition}", description="Grants"
        )
        self.timeouts = meter.create_counter(
            "aiozklock.lock.timeouts",
            unit="{timeout}",
            description="Acquisitions not granted in time (LockTimeout)",
        )
        self.losses = meter.create_counter(
            "aiozklock.lock.losses", unit="{loss}", description="Holdings found lost"
        )
        self.local_waiters = meter.create_up_down_counter(
            "aiozklock.lock.local_waiters",
            unit="{task}",
            description="Tasks of this process queued behind their recipe object's own node",
        )
        self.state_changes = meter.create_counter(
            "aiozklock.session.state_changes", unit="{change}", description="Session state changes"
        )
        self.reconnects = meter.create_counter(
            "aiozklock.session.reconnects",
            unit="{reconnect}",
            description="Connected again after a suspended or lost session",
        )


class Telemetry:
    """Metrics and traces of one or more clients: ``connect(hosts, telemetry=Telemetry())``.

    - ``meter_provider``, ``tracer_provider``: OpenTelemetry providers; None (the default)
      uses the global ones (``opentelemetry.metrics.get_meter_provider()`` ...), which do
      nothing until an SDK is configured. Pass ``trace.NoOpTracerProvider()`` for metrics
      without spans.
    - ``path_label``: maps a lock path (relative to the chroot) to the value of the
      ``aiozklock.lock.name`` attribute. Metrics must keep a bounded number of series, so
      the default, ``parent_label``, drops the last segment (``/locks/orders/*``); use
      ``lambda path: path`` when your lock paths are a fixed, small set. A multi-lock's
      name joins its paths' distinct labels with ``,``.

    Raises ``InvalidArgument`` if ``path_label`` is not callable.
    """

    def __init__(
        self,
        *,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        path_label: Callable[[str], str] = parent_label,
    ) -> None:
        if not callable(path_label):
            raise InvalidArgument(f"path_label must be callable, not {path_label!r}")
        self._path_label = path_label
        self._instruments = _Instruments(meter_provider, tracer_provider)

    def recipe(self, kind: str, paths: tuple[str, ...]) -> _RecipeTelemetry:
        """The observer of one recipe object (called by the client; see ``Observer``)."""
        name = ",".join(sorted({self._path_label(path) for path in paths}))
        return _RecipeTelemetry(self._instruments, kind, name, paths)

    def session_changed(self, change: StateChange) -> None:
        """Count a session state change (called by the client's session)."""
        previous = change.previous.value.lower()
        self._instruments.state_changes.add(
            1,
            {
                "aiozklock.session.state": change.state.value.lower(),
                "aiozklock.session.previous_state": previous,
            },
        )
        if change.state is SessionState.CONNECTED and change.previous in _RECONNECTED_FROM:
            self._instruments.reconnects.add(1, {"aiozklock.session.previous_state": previous})


class _RecipeTelemetry:
    """What one recipe object records (see ``RecipeObserver``)."""

    __slots__ = ("_attributes", "_instruments", "_paths")

    def __init__(
        self, instruments: _Instruments, kind: str, name: str, paths: tuple[str, ...]
    ) -> None:
        self._instruments = instruments
        self._attributes = {"aiozklock.recipe": kind, "aiozklock.lock.name": name}
        self._paths = paths

    def acquiring(self) -> _Attempt:
        span = self._instruments.tracer.start_span(
            "aiozklock.acquire",
            attributes={**self._attributes, "aiozklock.lock.paths": self._paths},
        )
        return _Attempt(self._instruments, self._attributes, span)

    def released(self, held: float) -> None:
        self._instruments.hold.record(held, self._attributes)

    def queued_locally(self, delta: int) -> None:
        self._instruments.local_waiters.add(delta, self._attributes)

    def lost(self, cause: str) -> None:
        self._instruments.losses.add(1, {**self._attributes, "aiozklock.loss.cause": cause})


class _Attempt:
    """One acquisition attempt and its span (see ``AcquireObserver``)."""

    __slots__ = ("_attributes", "_instruments", "_span")

    def __init__(
        self, instruments: _Instruments, attributes: dict[str, str], span: trace.Span
    ) -> None:
        self._instruments = instruments
        self._attributes = attributes
        self._span = span

    def acquired(self, waited: float, ahead: int | None, token: int) -> None:
        self._instruments.wait.record(waited, self._attributes)
        self._instruments.acquisitions.add(1, self._attributes)
        span = self._span
        span.set_attribute("aiozklock.outcome", "acquired")
        span.set_attribute("aiozklock.wait", waited)
        span.set_attribute("aiozklock.fencing_token", token)
        if ahead is not None:
            span.set_attribute("aiozklock.queue.ahead", ahead)
        span.end()

    def failed(self, waited: float, error: BaseException) -> None:
        span = self._span
        span.set_attribute("aiozklock.wait", waited)
        if isinstance(error, TimeoutError):
            self._instruments.timeouts.add(1, self._attributes)
            span.set_attribute("aiozklock.outcome", "timeout")
        elif isinstance(error, Exception):
            span.set_attribute("aiozklock.outcome", "error")
            span.record_exception(error)
            span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
        else:  # a cancellation: the caller gave up, nothing went wrong here
            span.set_attribute("aiozklock.outcome", "cancelled")
        span.end()


__all__ = ("BUCKETS", "DoctorGauges", "Telemetry", "parent_label")
