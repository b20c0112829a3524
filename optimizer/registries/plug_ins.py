"""Names beyond an enum's declared members, for the backends and precisions a plug-in registers
at run time (`register_backend`, `register_precision`; the tests' stand-in is one).

`Backend` and `Precision` list the ones this tree declares; the registries (`BACKENDS`,
`PRECISIONS`) list every one. A plug-in's name is made here, and each enum's `_missing_` accepts
it while a spec of that name is registered, so a job config, the database, the broker and a
job's process carry it as they carry the declared ones.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

__all__ = ["add_registered", "plug_in_member", "remove_registered"]

E = TypeVar("E", bound=StrEnum)
V = TypeVar("V")


def plug_in_member(enum: type[E], value: str) -> E:
    """A member of `enum` called `value` that the enum does not declare: equal to the string
    `value` and hashed as it, pickled by value (the enum's `_missing_` finds it again, in any
    process where the same plug-in has registered its spec). `list(enum)` stays the declared
    members; iterate the registry for every one.

    Raises:
        ValueError: `value` is one of `enum`'s declared members.
    """
    if value in enum._value2member_map_:
        raise ValueError(f"{value!r} is already a {enum.__name__}; a plug-in names a new one")
    member = str.__new__(enum, value)
    member._name_ = value.upper().replace("-", "_")
    member._value_ = value
    return member


def add_registered(registered: dict[E, V], name: E, value: V, what: str, *,
                   same: Callable[[V, V], bool]) -> None:
    """Put `value` in the live registry `registered` under `name`; again with the `same`
    value does nothing.

    Raises:
        ValueError: another value is registered under `name` (`what` names it in the message).
    """
    known = registered.get(name)
    if known is not None and not same(known, value):
        raise ValueError(f"{what} {str(name)!r} is registered already, with another one")
    registered[name] = value


def remove_registered(registered: dict[E, V], name: E, what: str) -> None:
    """Take out of `registered` what `add_registered` put there (a test's stand-in, when the
    test ends); the enum's declared members stay.

    Raises:
        ValueError: `name` is declared by its enum, or was not registered.
    """
    if name in type(name).__members__.values() or name not in registered:
        raise ValueError(f"{what} {str(name)!r} was not registered at run time")
    del registered[name]
