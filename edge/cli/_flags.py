"""Command-line flags generated from a pydantic-settings model, so a command's flags never
restate the model's fields, types, defaults or help.

Each field becomes ``--<field-name>`` (underscores as dashes) with the field's description,
default and environment variable in its help. A field's ``json_schema_extra`` may say:

- ``flag``: another flag name (``--name`` for ``service_name``);
- ``off_flag``: for an optional field, a flag that sets it to ``None`` (``--no-wyoming``);
- ``metavar``: the value's placeholder in the help;
- ``cli``: ``False`` for a field with no flag (a secret: the environment only).

Booleans get both forms (``--voice`` / ``--no-voice``); list and tuple fields are repeatable
flags (``--mdns-interface A --mdns-interface B``). A flag left out leaves the field to the
environment (``EDGE_*``) or its default.
"""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

_OFF = object()  # what an ``off_flag`` stores: the field is set to None


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Add one flag per field of ``model`` (a pydantic-settings model) to ``parser``."""
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("cli") is False:
            continue
        flag = str(extra.get("flag") or "--" + name.replace("_", "-"))
        kind, item = _kind(field.annotation)
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": _help(name, field, prefix)}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = item
            kwargs["metavar"] = extra.get("metavar") or name.split("_")[-1].upper()
            if kind in (list, tuple):
                kwargs["action"] = "append"
        parser.add_argument(flag, **kwargs)
        if extra.get("off_flag"):
            parser.add_argument(
                str(extra["off_flag"]),
                dest=name,
                action="store_const",
                const=_OFF,
                help=f"set {flag} to none (turn it off)",
            )


def model_from_flags(model: type[BaseModel], args: argparse.Namespace) -> Any:
    """``model`` from the flags given in ``args``; the rest come from the environment or
    the defaults (flags override ``EDGE_*`` variables)."""
    given: dict[str, Any] = {}
    for name in model.model_fields:
        value = getattr(args, name, None)  # None: not given (or no flag)
        if value is not None:
            given[name] = None if value is _OFF else value
    return model(**given)


def _kind(annotation: Any) -> tuple[Any, Any]:
    """(the field's container or scalar type, the type of one flag value)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _kind(args[0])
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return origin, _scalar(args[0])
    return annotation, _scalar(annotation)


def _scalar(annotation: Any) -> Any:
    if annotation in (int, float):
        return annotation
    return str  # str, Path and the like: pydantic converts the text


def _help(name: str, field: FieldInfo, prefix: str) -> str:
    default: Any = field.get_default(call_default_factory=True)
    if isinstance(default, Path):
        default = str(default).replace(str(Path.home()), "~", 1)
    elif isinstance(default, (list, tuple)):
        default = ", ".join(default) or "none"
    shown = "none" if default in (None, PydanticUndefined) else default
    text = field.description or name.replace("_", " ")
    return f"{text} (default {shown}; {prefix}{name.upper()})".replace("%", "%%")
