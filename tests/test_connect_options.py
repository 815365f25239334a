"""``connect()``'s options are written once: ``ConnectOptions`` (names and types), taken by
``connect()``, ``ZooKeeperClient``, ``aiozklock.sync.connect`` and FastAPI's ``lifespan``,
and ``ConnectionSettings`` (defaults and checks), which the client keeps. No server: only
the definitions and what validation keeps."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Unpack, get_type_hints

import pytest

import aiozklock
import aiozklock.sync
from aiozklock import ConnectOptions
from aiozklock._settings import ConnectionSettings


def _takers() -> list[Callable[..., Any]]:
    takers: list[Callable[..., Any]] = [
        aiozklock.connect,
        aiozklock.ZooKeeperClient,
        aiozklock.sync.connect,
    ]
    try:
        from aiozklock.fastapi import lifespan
    except ModuleNotFoundError:  # the fastapi extra is not installed
        return takers
    return [*takers, lifespan]


@pytest.mark.parametrize("taker", _takers(), ids=lambda taker: taker.__qualname__)
def test_every_face_takes_the_one_definition(taker: Callable[..., Any]) -> None:
    parameters = inspect.signature(taker, eval_str=True).parameters
    options = parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD
    assert options.annotation == Unpack[ConnectOptions]
    assert next(iter(parameters)) == "hosts"


def test_the_settings_take_each_option_with_its_type() -> None:
    """``ConnectionSettings(**options)`` accepts exactly the keys of ``ConnectOptions``,
    each with the same type (mypy checks the call; this checks the definitions agree)."""
    hints = get_type_hints(ConnectOptions)
    accepted = {}
    for name, parameter in inspect.signature(ConnectionSettings, eval_str=True).parameters.items():
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameter.default is not inspect.Parameter.empty, name
        annotation = parameter.annotation
        accepted[name] = (
            annotation.type if isinstance(annotation, dataclasses.InitVar) else annotation
        )
    assert accepted == hints


def test_connect_documents_every_option() -> None:
    doc = aiozklock.connect.__doc__ or ""
    missing = [name for name in ConnectOptions.__annotations__ if f"- ``{name}``:" not in doc]
    assert not missing, f"connect()'s docstring does not document {missing}"


def test_the_client_keeps_the_validated_values_under_its_public_names() -> None:
    zk = aiozklock.ZooKeeperClient(
        "127.0.0.1:2181/app",
        session_timeout=4,
        connect_timeout=3,
        loss_policy="expired",
        auth=[("digest", "alice:secret")],
        default_acl=aiozklock.CREATOR_ALL_ACL,
        max_request_bytes=2**20,
        check_lock_order="raise",
    )
    assert (zk.session_timeout, zk.connect_timeout) == (4.0, 3.0)
    assert isinstance(zk.session_timeout, float)
    assert zk.loss_policy == "expired"
    assert (zk.hosts, zk.chroot) == ("127.0.0.1:2181/app", "/app")
    assert zk.default_acl == tuple(aiozklock.CREATOR_ALL_ACL)
    assert zk.max_request_bytes == 2**20
    assert zk.check_lock_order == "raise"


def test_the_settings_do_not_show_credentials() -> None:
    settings = ConnectionSettings(auth=[("digest", "alice:secret")])
    assert settings.credentials == (("digest", b"alice:secret"),)
    assert "secret" not in repr(settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.session_timeout = 1.0  # type: ignore[misc]


def test_the_first_bad_option_is_reported_in_the_order_it_always_was() -> None:
    with pytest.raises(aiozklock.InvalidArgument, match=r"^empty entry"):
        aiozklock.connect("", session_timeout=-1)
    with pytest.raises(aiozklock.InvalidArgument, match=r"^max_request_bytes"):
        aiozklock.connect("h", auth="x", max_request_bytes=1)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match=r"^default_acl"):
        aiozklock.connect("h", default_acl=aiozklock.CREATOR_ALL_ACL, session_timeout=-1)
    with pytest.raises(aiozklock.InvalidArgument, match=r"^session_timeout"):
        aiozklock.connect("h", session_timeout=-1, loss_policy="never")  # type: ignore[arg-type]
