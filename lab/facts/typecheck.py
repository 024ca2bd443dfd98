"""Whether a value has a declared field type: one rule for the campaign file and for records.

Used by :mod:`lab.orchestration.config` (campaign-file sections) and :class:`lab.inputs.variants.Variant` (every
field, however the Variant is built: campaign file, ``pass.json``, journal rows). Standard
library only. The rule: JSON/TOML values against resolved type hints (``typing.get_type_hints``,
since annotations may be strings); ``bool`` is never an ``int`` or a ``float`` (``true`` is not
the batch size 1), an ``int`` is a ``float``. :func:`decode_refusal` reads the one-line refusal of a
strict msgspec decode (the records of ``pass.json`` and the journal: lab.inputs.variants.record_type).
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any


def type_ok(value: Any, hint: Any) -> bool:
    """isinstance against a resolved type hint (X, X | None, tuple[...]); bool is not int/float."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if origin in (tuple, list):  # and every element of the declared type: stop = [1] is not a list of strings
        return isinstance(value, (list, tuple)) and _elements_ok(value, hint)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _elements_ok(value: list | tuple, hint: Any) -> bool:
    """Every element of ``value`` of its declared type: ``tuple[X, ...]`` and ``list[X]`` give X to
    each, ``tuple[X, Y]`` one each (another length refused); a bare ``tuple``/``list`` any."""
    args = typing.get_args(hint)
    if not args:
        return True
    if args[-1] is Ellipsis or typing.get_origin(hint) is list:
        return all(type_ok(v, args[0]) for v in value)
    return len(args) == len(value) and all(type_ok(v, h) for v, h in zip(value, args, strict=True))


def type_name(hint: Any) -> str:
    """The expected type in words: 'an integer', 'a string', 'true or false', 'a list of strings'..."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (tuple, list):
        one = {a for a in args if a is not Ellipsis}
        plural: dict[Any, str] = {int: "integers", float: "numbers", str: "strings", bool: "true or false values"}
        word = plural.get(next(iter(one))) if len(one) == 1 else None
        return f"a list of {word}" if word else "a list"
    if args:
        return " or ".join(type_name(a) for a in args)
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        hint, getattr(hint, "__name__", str(hint)))


_REFUSAL = re.compile(r"(?:Object contains unknown field `(?P<unknown>[^`]*)`"
                      r"|Expected `object`, got `(?P<got>\w+)`|.*?)(?: - at `(?P<at>[^`]*)`)?")


def decode_refusal(message: str) -> tuple[str | None, str | None, str]:
    """(unknown key, JSON type given where an object was expected, path) from the one-line
    message of ``msgspec.ValidationError`` (msgspec 0.22: "Object contains unknown field `k` -
    at `$.variant`", "Expected `object`, got `array`"), so a strict decode's refusal can name the
    nearest valid key. None for a part the message does not hold; the path is "$" at the top."""
    m = _REFUSAL.fullmatch(message)
    if m is None:  # a message of another shape: nothing recognised
        return None, None, "$"
    return m["unknown"], m["got"], m["at"] or "$"
