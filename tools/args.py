"""Checking of tool-call arguments against the small part of JSON Schema the tools use.

Models send arguments they built from the schema, and sometimes get them wrong; a
precise message ("offset must be an integer >= 1") lets them fix the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.errors import ToolError

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}


def validate_args(args: object, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a checked copy of `args`, or raise `ToolError` naming what is wrong.

    An optional argument given as null is treated as left out.
    """
    if not isinstance(args, Mapping):
        raise ToolError("arguments must be a JSON object")
    properties: Mapping[str, Any] = schema.get("properties", {})
    required: list[str] = list(schema.get("required", []))
    checked = {k: v for k, v in args.items() if not (v is None and k not in required)}

    missing = [key for key in required if checked.get(key) is None]
    if missing:
        raise ToolError(f"missing required argument(s): {', '.join(missing)}")
    unknown = sorted(str(key) for key in checked if key not in properties)
    if unknown:
        expected = ", ".join(properties) or "none"
        raise ToolError(f"unexpected argument(s): {', '.join(unknown)}; expected: {expected}")

    for key, value in checked.items():
        checked[key] = _check_value(key, value, properties[key])
    return checked


def _check_value(key: str, value: Any, spec: Mapping[str, Any]) -> Any:
    kind = spec.get("type")
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = True
    if not ok:
        raise ToolError(f"{key} must be {_TYPE_NAMES.get(str(kind), kind)}")

    if "minimum" in spec and value < spec["minimum"]:
        raise ToolError(f"{key} must be >= {spec['minimum']}")
    if "exclusiveMinimum" in spec and value <= spec["exclusiveMinimum"]:
        raise ToolError(f"{key} must be > {spec['exclusiveMinimum']}")
    if "maximum" in spec and value > spec["maximum"]:
        raise ToolError(f"{key} must be <= {spec['maximum']}")
    if "minLength" in spec and len(value) < spec["minLength"]:
        raise ToolError(f"{key} must not be empty")
    return value
