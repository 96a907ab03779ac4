"""Reading and writing instance and result files, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from tangram.model.instance import Instance
from tangram.model.schedule import Result

M = TypeVar("M", bound=BaseModel)


class InputError(ValueError):
    """Bad input: the message names the file, the field path and the rule, on one line."""


def read_model(path: str | Path, cls: type[M]) -> M:
    """Parse and validate a JSON file as ``cls``."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return cls.model_validate_json(text)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc)}") from None


def describe(exc: ValidationError) -> str:
    """The first validation error as 'field.path: rule' (plus how many more)."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "json_invalid":
        msg = f"malformed JSON: {first.get('ctx', {}).get('error', msg)}"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {msg}{more}" if loc else f"{msg}{more}"


def read_instance(path: str | Path) -> Instance:
    return read_model(path, Instance)


def read_result(path: str | Path) -> Result:
    return read_model(path, Result)


def write_model(model: BaseModel, path: str | Path) -> None:
    """Write a model as indented JSON (atomically: a crash never leaves half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(model.model_dump_json(indent=2, exclude_defaults=False) + "\n")
    tmp.replace(path)


def instance_schema() -> str:
    """The JSON Schema of the instance format."""
    return json.dumps(Instance.model_json_schema(), indent=2)
