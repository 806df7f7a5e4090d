"""The base of the scenario's records: frozen dataclasses, checked as they are made.

Why not pydantic models: a simulated node agent (``gpuscope agent --gpu-source sim``) holds
a scenario, and the first pydantic model a process defines loads about 20 MiB of schema
machinery, most of the agent's memory (issue 24). So the records are plain frozen
dataclasses that check their own bounds (``annotated_types`` metadata, the same constraint
objects pydantic reads) and cross-field rules (:meth:`Spec._check`) when made in code, and
take the values pydantic's lax mode would (an int where a float is declared becomes a
float, a list where a tuple is declared a tuple). Reading a scenario file, or a scenario
sent as JSON, still goes through pydantic (:meth:`Spec.model_validate`, imported then), so
its errors name the field as before; ``model_copy``, ``model_dump`` and ``model_validate``
keep the names the rest of the code base has always called.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, cast

#: The fields' shapes: (name, "float" | "tuple" | "", the constraints, the default).
_Shape = tuple[tuple[str, str, tuple[object, ...], object], ...]


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    """The fields' shapes of ``cls``, read from its type hints once."""
    got = _SHAPES.get(cls)
    if got is None:
        got = _SHAPES[cls] = _read_shape(cls)
    return got


def _read_shape(cls: type) -> _Shape:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        bounds: tuple[object, ...] = ()
        if typing.get_origin(hint) is Annotated:
            hint, *meta = typing.get_args(hint)
            bounds = tuple(meta)
        origin = typing.get_origin(hint)
        optional_float = origin in (typing.Union, types.UnionType) and set(
            typing.get_args(hint)
        ) == {float, type(None)}
        kind = ""
        if hint is float or optional_float:
            kind = "float"
        elif origin is tuple:
            kind = "tuple"
        elif origin is typing.Literal:
            kind = "literal"
            bounds = (*bounds, typing.get_args(hint))
        out.append((f.name, kind, bounds, f.default))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """A number's bounds, as ``Annotated`` metadata: ``Annotated[int, Bounds(ge=0, le=16)]``.

    Checked by :meth:`Spec.__post_init__` for records made in code, and handed to pydantic
    (its own ``ge``/``gt``/``le`` constraints) when a record is read from a file, so its
    errors name the field. Not ``annotated_types`` (what pydantic's ``Field`` uses): that
    costs the node agent another MiB of imports.
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None

    def problem(self, value: Any) -> str | None:
        """pydantic's message when ``value`` is out of bounds; None when it is within."""
        if self.ge is not None and not value >= self.ge:
            return f"Input should be greater than or equal to {self.ge:g}"
        if self.gt is not None and not value > self.gt:
            return f"Input should be greater than {self.gt:g}"
        if self.le is not None and not value <= self.le:
            return f"Input should be less than or equal to {self.le:g}"
        return None

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        for key in ("ge", "gt", "le"):
            value = getattr(self, key)
            if value is not None:
                schema[key] = value
        return schema


_ADAPTERS: dict[type, Any] = {}


def _adapter(cls: type) -> Any:
    """pydantic's validator of ``cls``, made once (imported only to read a file or JSON:
    never in a node agent)."""
    got = _ADAPTERS.get(cls)
    if got is None:
        from pydantic import TypeAdapter

        got = _ADAPTERS[cls] = TypeAdapter(cls)
    return got


class Spec:
    """Mixed into the scenario's frozen dataclasses (``@dataclass(frozen=True, kw_only=True)``)."""

    #: pydantic reads this when it validates the dataclass: unknown keys are refused.
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    def __post_init__(self) -> None:
        for name, kind, bounds, default in _shape(type(self)):
            value = getattr(self, name)
            if value is default:  # as pydantic, defaults are taken as written
                continue
            if kind == "float" and type(value) is int:
                value = float(value)
                object.__setattr__(self, name, value)
            elif kind == "tuple" and isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, name, value)
            if value is None:
                continue
            for bound in bounds:
                if kind == "literal" and isinstance(bound, tuple):
                    if value not in bound:
                        choices = " or ".join(repr(b) for b in bound)
                        raise ValueError(f"{type(self).__name__}.{name}: Input should be {choices}")
                    continue
                problem = bound.problem(value) if isinstance(bound, Bounds) else None
                if problem is not None:
                    raise ValueError(f"{type(self).__name__}.{name}: {problem}")
        self._check()

    def _check(self) -> None:
        """Rules across fields; raise ValueError to refuse."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with ``update``'s fields replaced (checked again)."""
        return cast(Self, dataclasses.replace(cast(Any, self), **(update or {})))

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """Made from a mapping (a YAML file, JSON) by pydantic's rules; raises
        ``pydantic.ValidationError`` naming the field."""
        return cast(Self, _adapter(cls).validate_python(data))

    def model_dump(self, *, mode: str = "python", exclude_defaults: bool = False) -> dict[str, Any]:
        """The fields as a mapping (``mode="json"``: lists, plain numbers)."""
        dumped = _adapter(type(self)).dump_python(
            self, mode=mode, exclude_defaults=exclude_defaults
        )
        return cast(dict[str, Any], dumped)
