"""Typed topics: a name bound to one pydantic payload class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class PayloadError(TypeError):
    """A message does not match its topic's payload class."""


@dataclass(frozen=True)
class Topic(Generic[M]):
    """A named channel whose messages are instances of ``payload``.

    Two topics are the same topic when name and payload class are equal. The runtime
    refuses to register two different payload classes under one name.
    """

    name: str
    payload: type[M]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a topic needs a non-empty name")

    def validate(self, message: Any) -> M:
        """Return ``message`` as this topic's payload class, or raise :class:`PayloadError`."""
        if type(message) is self.payload:
            return message
        if isinstance(message, BaseModel):
            raise PayloadError(
                f"topic {self.name!r} carries {self.payload.__name__}, got {type(message).__name__}"
            )
        try:
            return self.payload.model_validate(message)
        except ValidationError as exc:
            raise PayloadError(
                f"topic {self.name!r}: invalid {self.payload.__name__}: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, {self.payload.__name__})"
