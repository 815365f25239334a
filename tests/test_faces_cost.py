"""The integrations cost nothing unless imported: ``import aiozklock`` (and the sync face)
loads neither FastAPI nor OpenTelemetry, nor their packages in aiozklock."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import sys
import aiozklock
import aiozklock.sync
loaded = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("fastapi", "starlette", "opentelemetry")
    or m.startswith(("aiozklock.fastapi", "aiozklock.otel"))
)
print(loaded)
"""


def test_importing_aiozklock_loads_no_integration() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
