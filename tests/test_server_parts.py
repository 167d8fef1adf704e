"""`EdgeService` holds one frozen set of parts, built once, plus its lifecycle."""

from __future__ import annotations

import dataclasses

import pytest

from edge.decisions import ScriptedDecisions
from edge.llm import ScriptedLLM
from edge.server import EdgeService, ServiceParts
from tests.server_helpers import answer_for, settings


def test_the_service_holds_its_parts_frozen_and_each_is_one_object() -> None:
    service = EdgeService(settings(), llm=ScriptedLLM(answer_for), decisions=ScriptedDecisions())
    parts = service.parts
    assert isinstance(parts, ServiceParts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.router = None  # type: ignore[misc]
    for field in dataclasses.fields(ServiceParts):
        if field.name != "access_token":  # the service shows the current one: service.token
            assert getattr(service, field.name) is getattr(parts, field.name), field.name
    assert service.addresses.parts is parts
    assert service.store.records.database is service.store.database  # one database, held
    assert service.describe()["websocket"] is None  # not listening yet
