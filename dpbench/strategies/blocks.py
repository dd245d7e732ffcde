"""A model's blocks: the repeated modules that FSDP shards one by one (and that activation
checkpointing recomputes), found the way the tools people train with find them.

In this order: the classes named for the model (FSDP's ``units`` option or
:attr:`dpbench.Workload.blocks`); the classes a Hugging Face model declares not to be split
(``_no_split_modules``, what accelerate's FSDP auto-wrap uses); else the repeated class that holds
the most parameters among the children of ``nn.Sequential`` / ``nn.ModuleList`` containers (a
transformer's decoder layers, a ResNet's residual blocks; a repeated leaf such as an MLP's
``Linear`` layers is no block). Each block is an outermost instance: a
block nested inside another is part of the outer one; a block that shares a parameter with the
rest of the model (tied embeddings) stays with the root.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["find_blocks", "parse_units", "repeated_classes"]

# Containers are not blocks: their children are.
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


def parse_units(value: Any, *, what: str = "fsdp option units") -> tuple[str, ...]:
    """``"Block"`` or ``"Block,OtherBlock"`` (module class names) → the names; else a ValueError."""
    if value is None:
        return ()
    names = tuple(v.strip() for v in value.split(",")) if isinstance(value, str) else ()
    if not names or not all(n.isidentifier() for n in names):
        raise ValueError(f"{what}: expected module class names separated by commas (e.g. 'Block'), found {value!r}")
    return names


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def _outermost(model: Any, chosen: set[int]) -> list[Any]:
    """The modules in ``chosen`` (by id) that no other chosen module contains, in module order; a
    module that shares a parameter with the rest of the model (tied embeddings) is left out: it
    stays with the root, as FSDP must group a tied parameter once."""
    out: list[Any] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside:
            continue
        if id(module) in chosen and not _shares_a_parameter(model, module):
            out.append(module)
            inside.update(id(m) for m in module.modules())
    return out


def _shares_a_parameter(model: Any, block: Any) -> bool:
    own = {id(m) for m in block.modules()}
    held = {id(p) for p in block.parameters()}
    return any(
        id(p) in held
        for m in model.modules(remove_duplicate=False)
        if id(m) not in own
        for p in m.parameters(recurse=False)
    )


def repeated_classes(model: Any) -> Counter[str]:
    """Module classes (not containers) that appear more than once, with parameters: the names a
    ``units`` option may give."""
    counts = Counter(
        type(m).__name__ for m in model.modules() if type(m).__name__ not in _CONTAINERS and _has_parameters(m)
    )
    return Counter({name: n for name, n in counts.items() if n > 1})


def find_blocks(model: Any, names: Sequence[str] = ()) -> tuple[list[Any], str]:
    """The blocks of ``model`` and how they were found (``"named"``, ``"no_split_modules"``,
    ``"repeated"``; ``""`` with no block). ``names`` that match no module are a ValueError listing
    the model's repeated classes."""
    if names:
        wanted = set(names)
        chosen = {id(m) for m in model.modules() if type(m).__name__ in wanted and m is not model}
        if not chosen:
            known = ", ".join(f"{name} ({n})" for name, n in repeated_classes(model).most_common()) or "none"
            raise ValueError(
                f"units: no module of class {', '.join(map(repr, names))} in the model; its repeated module "
                f"classes: {known}"
            )
        return _outermost(model, chosen), "named"
    declared: set[str] = set()
    for module in model.modules():
        declared |= set(getattr(module, "_no_split_modules", None) or ())
    if declared:
        chosen = {id(m) for m in model.modules() if type(m).__name__ in declared and m is not model}
        if chosen:
            return _outermost(model, chosen), "no_split_modules"
    # The children of containers that repeat one class: the class whose instances hold the most parameters.
    held: Counter[str] = Counter()
    members: dict[str, set[int]] = {}
    for container in model.modules():
        if type(container).__name__ not in ("Sequential", "ModuleList"):
            continue
        kinds = Counter(type(c).__name__ for c in container.children())
        for child in container.children():
            kind = type(child).__name__
            # A block is made of layers: a repeated leaf (an MLP's Linear layers) is no block.
            composite = any(True for _ in child.children())
            if kinds[kind] > 1 and kind not in _CONTAINERS and composite and _has_parameters(child):
                held[kind] += sum(p.numel() for p in child.parameters())
                members.setdefault(kind, set()).add(id(child))
    if not held:
        return [], ""
    kind = max(held, key=lambda k: (held[k], k))
    return _outermost(model, members[kind]), "repeated"
