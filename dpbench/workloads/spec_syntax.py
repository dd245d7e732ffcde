"""The workload spec syntax (see :mod:`dpbench.workloads.specs` for what each kind resolves to):
``TARGET[@key=value,key=value]`` where TARGET is a registered name, ``MODULE:ATTR``,
``path/to/file.py:ATTR``, ``hf:MODEL_TYPE`` or ``hf:PATH``. Parsing imports nothing."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from dpbench.errors import did_you_mean

__all__ = [
    "GLOBAL_BATCH_KEY",
    "SpecError",
    "WorkloadSpec",
    "close_names",
    "parse_int_tuple",
    "parse_spec",
    "parse_value",
    "split_specs",
]

GLOBAL_BATCH_KEY = "global_batch"
_CONTINUATION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*=[^:/@]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class SpecError(ValueError):
    """A workload spec that names nothing dpbench can build; the message is one line."""


@dataclass(kw_only=True, frozen=True)
class WorkloadSpec:
    """A parsed workload spec."""

    text: str
    """The spec as written."""
    kind: str
    """``name``, ``module``, ``file`` or ``hf``."""
    target: str
    """The registered name, module, file path, or (``hf``) model type or directory."""
    attr: str = ""
    """The attribute of a module or file spec."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """The ``key=value`` overrides, values parsed."""

    @property
    def canonical(self) -> str:
        """The spec written back: its target, ``:attr``, and the overrides in the order given."""
        base = {"name": self.target, "hf": f"hf:{self.target}"}.get(self.kind, f"{self.target}:{self.attr}")
        if not self.overrides:
            return base
        return base + "@" + ",".join(f"{k}={_format_value(v)}" for k, v in self.overrides.items())


def parse_value(raw: str) -> Any:
    """An override's value: int, float, bool, None, else the string itself."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "x".join(map(str, value))
    return str(value)


def parse_spec(text: str) -> WorkloadSpec:
    """Parse ``text`` (no import happens here); a malformed spec is a :class:`SpecError`."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"workload spec: expected a non-empty string, found {text!r}")
    text = text.strip()
    head, _, tail = text.partition("@")
    overrides: dict[str, Any] = {}
    if tail or text.endswith("@"):
        for item in tail.split(","):
            key, eq, raw = item.partition("=")
            key = key.strip()
            if not eq or not _KEY.match(key):
                raise SpecError(f"workload spec {text!r}: expected overrides as key=value,key=value, found {item!r}")
            if key in overrides:
                raise SpecError(f"workload spec {text!r}: override {key!r} is given twice")
            overrides[key] = parse_value(raw.strip())
    if head.startswith("hf:"):
        target = head[3:]
        if not target:
            raise SpecError(f"workload spec {text!r}: expected hf:MODEL_TYPE or hf:PATH, found nothing after hf:")
        return WorkloadSpec(text=text, kind="hf", target=target, overrides=overrides)
    if ":" in head:
        target, _, attr = head.rpartition(":")
        if not target or not attr.isidentifier():
            raise SpecError(f"workload spec {text!r}: expected MODULE:ATTR or path/to/file.py:ATTR, found {head!r}")
        kind = "file" if target.endswith(".py") or "/" in target or os.sep in target else "module"
        return WorkloadSpec(text=text, kind=kind, target=target, attr=attr, overrides=overrides)
    return WorkloadSpec(text=text, kind="name", target=head, overrides=overrides)


def split_specs(raw: str) -> tuple[str, ...]:
    """Specs of a comma-separated list, where a ``key=value`` item continues the spec before it."""
    specs: list[str] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        if specs and _CONTINUATION.match(item):
            specs[-1] += ("," if "@" in specs[-1] else "@") + item
        else:
            specs.append(item)
    return tuple(specs)


def close_names(name: str, known: list[str] | tuple[str, ...], *, what: str) -> str:
    """``" (did you mean 'x'?); known <what>: a, b, …"``, to follow the refused name: the closest
    names (:func:`dpbench.errors.did_you_mean`; up to three, since the list may be cut), then a
    bounded list."""
    listed = ", ".join(sorted(known)[:40]) + (", …" if len(known) > 40 else "")
    return f"{did_you_mean(name, known, most=3)}; known {what}: {listed or 'none'}"


def parse_int_tuple(spec: str, key: str, value: Any) -> tuple[int, ...]:
    """An override of a sequence field: ints joined by ``x`` (``8x16x32``), or one int."""
    try:
        return tuple(int(v) for v in str(value).split("x"))
    except ValueError:
        raise SpecError(f"workload spec {spec!r}: {key}: expected ints joined by x (8x16), found {value!r}") from None
