"""The doctor's thresholds by default: here, apart, so that the client's signature can name
them without importing the doctor (it is loaded on the first ``diagnose()``)."""

HOLD_WARNING = 60.0  # seconds: a holder older than this is reported
QUEUE_WARNING = 10  # waiters on one path from which the queue is reported
LEFTOVER_AGE = 600.0  # seconds empty before a parent counts as left behind

__all__ = ("HOLD_WARNING", "LEFTOVER_AGE", "QUEUE_WARNING")
