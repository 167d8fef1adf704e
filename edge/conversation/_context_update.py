"""The text-only context update payload (defined with the other messages in
:mod:`edge.interaction`, re-exported here)."""

from edge.interaction import ConversationContextUpdate

__all__ = ["ConversationContextUpdate"]
