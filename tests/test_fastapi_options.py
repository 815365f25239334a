"""``aiozklock.fastapi.lifespan`` takes every option of ``aiozklock.connect()``, typed: the
signatures match, mypy checks them in user code, and telemetry, credentials with a default
ACL, and TLS reach the application's client (real FastAPI over httpx's ASGI transport, real
ZooKeeper, the real OpenTelemetry SDK).

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations.
"""

import inspect
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aiozklock
from aiozklock import ACL, CREATOR_ALL_WORLD_READ_ACL, Perms
from aiozklock.fastapi import lifespan, locked
from aiozklock.otel import Telemetry
from aiozklock.testing import TLSFiles, ZooKeeperCluster
from tests.conftest import MYPY_CACHE, ClientFactory
from tests.test_fastapi import ORDER, serve

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::RuntimeWarning")]

ALICE = ("digest", "alice:alice-secret")


def test_lifespan_takes_every_connect_option_with_its_type_and_default() -> None:
    """Fails when ``connect()`` gains (or changes) an option that ``lifespan()`` lacks."""
    options = inspect.signature(aiozklock.connect, eval_str=True).parameters
    mine = dict(inspect.signature(lifespan, eval_str=True).parameters)
    assert mine.pop("app_lifespan").kind is inspect.Parameter.KEYWORD_ONLY
    missing = sorted(set(options) - set(mine))
    assert not missing, f"add connect()'s option(s) {missing} to aiozklock.fastapi.lifespan"
    assert list(mine) == list(options)  # no extra one, the same order
    for name, option in options.items():
        theirs = (option.kind, option.default, option.annotation)
        assert (mine[name].kind, mine[name].default, mine[name].annotation) == theirs, name


def test_mypy_checks_the_options_in_user_code(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    program = tmp_path / "program.py"
    program.write_text(
        "import ssl\n\n"
        "from aiozklock import CREATOR_ALL_ACL\n"
        "from aiozklock.fastapi import lifespan\n"
        "from aiozklock.otel import Telemetry\n\n"
        "lifespan('zk', telemetry=Telemetry(), auth=[('digest', 'a:b')],\n"
        "         default_acl=CREATOR_ALL_ACL, ssl=ssl.create_default_context())\n"
        "lifespan('zk', session_timeout='10')\n"
        "lifespan('zk', telemetry=3)\n"
        "lifespan('zk', auth=[('digest', 7)])\n"
        "lifespan('zk', ssl='yes')\n"
        "lifespan('zk', loss_policy='never')\n"
        "lifespan('zk', no_such_option=1)\n"
    )
    out, err, status = api.run(["--strict", "--cache-dir", MYPY_CACHE, str(program)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out + err
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert lines == [9, 10, 11, 12, 13, 14], out  # each bad line, not the good call
    assert '"no_such_option"' in out


async def test_telemetry_traces_each_request_lock(hosts: str) -> None:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(meter_provider=meter_provider, tracer_provider=tracer_provider)
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0, telemetry=telemetry))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)]
    ) -> int:
        return lock.fencing_token

    try:
        with anyio.fail_after(10):
            async with serve(app) as http:
                tokens = [(await http.post(f"/orders/{n}")).json() for n in (7, 8)]
        spans = [s for s in exporter.get_finished_spans() if s.name == "aiozklock.acquire"]
        assert [s.attributes["aiozklock.lock.paths"] for s in spans if s.attributes] == [
            ("/locks/orders/7",),
            ("/locks/orders/8",),
        ]
        assert [s.attributes["aiozklock.fencing_token"] for s in spans if s.attributes] == tokens
        data = reader.get_metrics_data()
        assert data is not None
        names = {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
        assert "aiozklock.lock.acquisitions" in names
    finally:
        meter_provider.shutdown()
        tracer_provider.shutdown()


async def test_credentials_and_default_acl_protect_the_request_locks(
    hosts: str, open_client: ClientFactory
) -> None:
    app = FastAPI(
        lifespan=lifespan(
            hosts, session_timeout=4.0, auth=[ALICE], default_acl=CREATOR_ALL_WORLD_READ_ACL
        )
    )
    anonymous = await open_client()
    seen: dict[str, object] = {}

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)]
    ) -> None:
        node = f"{lock.path}/{lock.statistics().node}"
        seen["acl"] = (await anonymous.get_acl(node))[0]
        with pytest.raises(aiozklock.NoAuthError):
            await anonymous.delete(node)  # its parent's ACL refuses others
        seen["refused"] = True

    with anyio.fail_after(10):
        async with serve(app) as http:
            response = await http.post("/orders/7")
    assert response.status_code == 200
    hidden = ACL(Perms.ALL, "digest", "alice:x")  # the hash hidden: no ADMIN for others
    assert seen == {"acl": [hidden, ACL(Perms.READ, "world", "anyone")], "refused": True}


@pytest.mark.timeout(60)
async def test_tls_reaches_the_secure_port(
    zk_tls_cluster: ZooKeeperCluster, zk_tls_files: TLSFiles, chroot: str
) -> None:
    secure = zk_tls_cluster.secure_hosts + chroot
    app = FastAPI(lifespan=lifespan(secure, ssl=zk_tls_files.client_context()))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)]
    ) -> int:
        return lock.fencing_token

    with anyio.fail_after(30):
        async with serve(app) as http:
            response = await http.post("/orders/7")
    assert response.status_code == 200
    assert response.json() > 0
