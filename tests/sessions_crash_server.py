"""The service as a process for the crash test (``tests/test_sessions_crash.py``).

``python tests/sessions_crash_server.py DATA_DIR`` runs :class:`edge.server.EdgeService`
(the real WebSocket server, router, conversation, context manager and SQLite store) with a
scripted model and small budgets, so compactions happen every few turns. It prints
``PORT <n>`` once listening, and ``COMPACT <participant>`` when a compaction starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

import edge.server._service_parts as service_module
from edge.conversation import ContextConfig, ContextManager
from edge.decisions import ScriptedDecisions
from edge.llm import ChatMessage, ScriptedLLM, ScriptedReply
from edge.server import EdgeService, ServiceSettings

BUDGETS = {
    "dialogue_budget_bytes": 900,
    "topic_budget_bytes": 400,
    "compaction_input_budget_bytes": 800,
    "compaction_quiet_s": 0.0,
}


def reply(messages: list[ChatMessage]) -> ScriptedReply:
    if "Write plain text only" in messages[0].content:
        return ScriptedReply("Earlier turns were about numbered questions.", delay_s=0.03)
    return ScriptedReply(f"Noted: {messages[-1].content[:40]}", delay_s=0.002)


def budgeted(llm, config: ContextConfig | None = None, **kwargs) -> ContextManager:  # type: ignore[no-untyped-def]
    """The service's context manager, with this test's small budgets."""
    return ContextManager(llm, (config or ContextConfig()).with_options(**BUDGETS), **kwargs)


async def main(data_dir: str) -> None:
    service_module.ContextManager = budgeted  # type: ignore[misc]
    settings = ServiceSettings(
        host="127.0.0.1", port=0, wyoming_port=None, mdns=False, voice=False, notes=False,
        insecure=True, data_dir=Path(data_dir),
    )  # fmt: skip
    service = EdgeService(
        settings, llm=ScriptedLLM(reply), decisions=ScriptedDecisions("conversation")
    )

    def started(request: object) -> None:
        print(f"COMPACT {getattr(request, 'participant_id', '?')}", flush=True)

    service.context.add_hook("pre_compact", started)
    async with service:
        print(f"PORT {service.websocket.bound_port}", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
