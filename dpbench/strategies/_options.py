"""Strategy options as frozen, keyword-only dataclasses, checked in the parent.

Each strategy declares one options class (``DDPOptions`` in ``ddp.py``, ...) that extends
:class:`CommonOptions` (``optimizer``, ``precision``: every strategy) or :class:`CompileOptions`
(those plus ``compile``). Every field carries an attribute docstring (the string literal on the
line after it): :func:`describe_options` reads them back for ``dpbench list`` and for the docs'
generated options table (python -m tools.gen_docs).

Checked before any process starts, so a bad value is one clear line and a configuration this
machine cannot run is a :class:`StrategyUnavailable` (a skip with its reason in the suites).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import numbers
import os
import re
import shutil
import subprocess
import sysconfig
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dpbench.schema import DEFAULT_OPTIMIZER, DEFAULT_PRECISION, OPTIMIZERS, PRECISIONS
from dpbench.strategies.errors import StrategyUnavailable

__all__ = [
    "SHARED_OPTIONS",
    "CommonOptions",
    "CompileOptions",
    "OptionDoc",
    "describe_options",
    "field_docs",
    "check_compiler",
    "LibcudaLink",
    "libcuda_link",
    "triton_driver_libraries",
    "python_header",
    "is_positive_number",
    "is_int_in",
]

# The options strategies share, in the order they follow each strategy's own options in a resolved
# dict. Saved results record that dict key by key, so this order is part of the results format.
SHARED_OPTIONS = ("checkpoint", "compile", "optimizer", "precision")
# torch.compile's CPU backend (inductor) builds C++ with $CXX or g++; Triton (CUDA) builds its
# launcher with a C compiler.
_C_COMPILERS = ("cc", "gcc", "clang")


def is_positive_number(value: Any) -> bool:
    """A real number above 0 (``True`` is an int to Python, not a number here)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and value > 0


def is_int_in(value: Any, low: int, high: float = float("inf")) -> bool:
    """An int (not a bool) between ``low`` and ``high``, both included."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


@dataclass(frozen=True, kw_only=True)
class CommonOptions:
    """The options every strategy takes. Values are stored as given; :meth:`check` refuses bad ones."""

    # The strategy these options belong to: the first word of every error message.
    strategy: ClassVar[str] = "strategy"

    optimizer: str = DEFAULT_OPTIMIZER
    """``"sgd"`` (plain SGD, no momentum) or ``"adamw"`` (torch's defaults apart from ``lr``)."""

    precision: str = DEFAULT_PRECISION
    """``"fp32"``, ``"bf16"`` (autocast, CPU and CUDA) or ``"fp16"`` (autocast + GradScaler, CUDA only)."""

    checkpoint: bool = False
    """Activation checkpointing per block: backward recomputes each block's activations instead of keeping them.

    The blocks are the model's (:mod:`dpbench.strategies.blocks`, or ``Workload.blocks``), wrapped
    before the strategy shards or replicates the model, as torchtitan does.
    """

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, device: str, world_size: int, global_batch: int) -> CommonOptions:
        """The options a user set by name (a dict, a suite's case, ``launch``'s keywords), defaults
        filled in and checked; an unknown name is a ``ValueError`` listing the known ones."""
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"Unknown option(s) {', '.join(map(repr, unknown))} for strategy {cls.strategy!r}. "
                f"Known options: {', '.join(sorted(known)) or '(none)'}"
            )
        parsed = cls(**options)
        parsed.check(device=device, world_size=world_size, global_batch=global_batch)
        return parsed

    @classmethod
    def from_saved(cls, options: Mapping[str, Any]) -> CommonOptions:
        """The options a saved case recorded (its resolved dict): names this version does not know
        left out, missing ones at their defaults; not checked again (the case ran with them)."""
        known = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in options.items() if name in known})

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        """Refuse a bad value (``ValueError``) or one this machine cannot run (:class:`StrategyUnavailable`).

        Subclasses check the shared options first (``super().check(...)``), then their own.
        """
        self.require_bool("checkpoint")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"{self.strategy} option optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"{self.strategy} option precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        if self.precision == "fp16" and device != "cuda":
            raise StrategyUnavailable(
                f"{self.strategy} option precision='fp16' needs device='cuda': fp16 training needs loss scaling "
                f"(a GradScaler) and fast fp16 kernels, which dpbench uses on CUDA only; use precision='bf16' on CPU"
            )

    def require_bool(self, *names: str) -> None:
        """Refuse anything but ``True`` or ``False`` (``1`` or ``"no"`` would otherwise pass as truthy)."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{self.strategy} option {name} must be True or False, got {value!r}")

    def as_dict(self) -> dict[str, Any]:
        """The plain dict the launcher, the workers and saved results use: own options first, then
        :data:`SHARED_OPTIONS`; values as given (``25`` stays an int, a list stays a list)."""
        names = [field.name for field in dataclasses.fields(self)]
        ordered = [name for name in names if name not in SHARED_OPTIONS]
        ordered += [name for name in SHARED_OPTIONS if name in names]
        return {name: getattr(self, name) for name in ordered}


@dataclass(frozen=True, kw_only=True)
class CompileOptions(CommonOptions):
    """The common options plus ``compile``, for the strategies that can ``torch.compile`` their model."""

    compile: bool = False
    """``torch.compile`` the model, in set-up outside every timed step (its time: ``compile_time_s``)."""

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        self.require_bool("compile")
        if self.compile:
            check_compiler(self.strategy, device=device)


def check_compiler(strategy: str, *, device: str) -> None:
    """torch.compile builds native code: refuse before any process starts when what it needs is not
    here — a C compiler, the C++ one on CPU, ``Python.h`` (both backends' generated code includes it)
    and, on CUDA, Triton and the ``libcuda`` file its launcher links against (:func:`libcuda_link`)."""
    c_found = [name for name in _C_COMPILERS if shutil.which(name)]
    cxx = os.environ.get("CXX") or "g++"
    if not c_found:
        raise StrategyUnavailable(
            f"{strategy} option compile=True needs a C compiler (torch.compile builds native code), "
            f"but none of {', '.join(_C_COMPILERS)} is on PATH"
        )
    if device == "cpu" and not shutil.which(cxx):
        raise StrategyUnavailable(
            f"{strategy} option compile=True on CPU needs the C++ compiler torch.compile's inductor calls "
            f"(CXX or g++: {cxx!r}), which is not on PATH"
        )
    header = python_header()
    if not header.is_file():
        raise StrategyUnavailable(
            f"{strategy} option compile=True needs Python's C headers (torch.compile's generated code "
            f"includes Python.h), but {header} is missing: install the python3-dev package for this Python"
        )
    if device == "cuda":
        refusal = libcuda_link().refusal(strategy)
        if refusal is not None:
            raise StrategyUnavailable(refusal)


def python_header() -> Path:
    """Where this interpreter's ``Python.h`` is (it may be missing: no python3-dev)."""
    return Path(sysconfig.get_paths()["include"]) / "Python.h"


_DRIVER = "libcuda.so.1"  # the driver's soname: what the driver package installs, and what Triton looks for


@dataclass(frozen=True, kw_only=True)
class LibcudaLink:
    """Whether Triton can build its CUDA launcher here: it finds the driver (``libcuda.so.1``) and
    passes its directories to the C compiler with ``-L``, then links ``libraries`` from its NVIDIA
    driver module. Triton releases before triton-lang/triton#8668 link ``-lcuda``, which needs the
    unversioned ``libcuda.so`` (a symlink the driver's development package installs, often missing
    from an image that has the driver); later ones link ``-l:libcuda.so.1`` itself."""

    triton: bool
    """Whether this Python has Triton (torch.compile's CUDA backend)."""

    flag: str
    """How Triton links the driver: ``-lcuda`` or ``-l:libcuda.so.1``."""

    needs: str
    """The file that flag makes the linker look for: ``libcuda.so`` or ``libcuda.so.1``."""

    triton_dirs: tuple[str, ...]
    """Where Triton finds ``libcuda.so.1`` (``TRITON_LIBCUDA_PATH``, ldconfig's cache or
    ``LD_LIBRARY_PATH``, the first that names one): the ``-L`` directories it links with."""

    found: str | None
    """Where the linker finds ``needs``: in ``triton_dirs``, on ``LIBRARY_PATH`` or in the C
    compiler's own search path (``-print-file-name``); None: nowhere."""

    def refusal(self, strategy: str) -> str | None:
        """Why ``strategy`` with ``compile=True`` cannot run on CUDA here (one line), or None."""
        prefix = f"{strategy} option compile=True on CUDA needs"
        if not self.triton:
            return f"{prefix} Triton (torch.compile's CUDA backend), which this Python does not have"
        if not self.triton_dirs:
            return (
                f"{prefix} a {_DRIVER} Triton can find (TRITON_LIBCUDA_PATH, ldconfig's cache or LD_LIBRARY_PATH), "
                "but none of them lists one"
            )
        if self.found is None:
            return (
                f"{prefix} {self.needs} for Triton's {self.flag} link, but only {_DRIVER} is here "
                f"({', '.join(self.triton_dirs)}): link {self.needs} to it there or in a directory on LIBRARY_PATH"
            )
        return None


def triton_driver_libraries() -> tuple[str, ...] | None:
    """The ``libraries`` Triton's NVIDIA backend links its launchers against, read from its source
    (not imported: the parent stays free of Triton and CUDA); None: no Triton here. A Triton whose
    driver module lists none links what it needs itself: ``()``."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    driver = Path(list(spec.submodule_search_locations)[0], "backends", "nvidia", "driver.py")
    try:
        tree = ast.parse(driver.read_text())
    except (OSError, SyntaxError, ValueError):
        return ()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "libraries" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            return tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ()


def _link(library: str) -> tuple[str, str]:
    """Triton's flag for ``library`` and the file it makes the linker look for: ``-l:FILE`` for a file
    name, ``-lNAME`` (``libNAME.so``) for a name."""
    if re.search(r"\.so(\.\d+)*$|\.a$", library):
        return f"-l:{library}", library
    return f"-l{library}", f"lib{library}.so"


def libcuda_link(environ: Any = None) -> LibcudaLink:
    """How Triton would link against the driver here, looked up where it and its linker look."""
    env = os.environ if environ is None else environ
    libraries = triton_driver_libraries()
    flag, needs = next((_link(lib) for lib in libraries or () if "cuda" in lib), _link(_DRIVER))
    dirs = _triton_libcuda_dirs(env)
    library_path = [d for d in (env.get("LIBRARY_PATH") or "").split(os.pathsep) if d]
    found = next((str(Path(d, needs)) for d in [*dirs, *library_path] if Path(d, needs).exists()), None)
    return LibcudaLink(
        triton=libraries is not None,
        flag=flag,
        needs=needs,
        triton_dirs=tuple(dirs),
        found=found or (_compiler_finds(needs, env) if dirs else None),
    )


def _triton_libcuda_dirs(env: Any) -> list[str]:
    """Triton's ``libcuda_dirs()``: ``TRITON_LIBCUDA_PATH``, else the directories of ldconfig's
    ``libcuda.so.1`` entries, else those on ``LD_LIBRARY_PATH`` holding one — the ones that hold it."""
    given = [d for d in (env.get("TRITON_LIBCUDA_PATH") or "").split(os.pathsep) if d]
    if given:
        return [d for d in given if Path(d, _DRIVER).exists()]
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None)
    listing = ""
    if ldconfig:
        try:
            listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
    cached = [os.path.dirname(line.split()[-1]) for line in listing.splitlines() if _DRIVER in line]
    if cached:  # Triton links with all of them, and fails unless one holds the driver
        return [d for d in dict.fromkeys(cached) if Path(d, _DRIVER).exists()]
    return [d for d in (env.get("LD_LIBRARY_PATH") or "").split(os.pathsep) if d and Path(d, _DRIVER).exists()]


def _compiler_finds(name: str, env: Any) -> str | None:
    """Where Triton's C compiler (``CC``, else gcc, else clang) finds ``name`` on its own library path."""
    cc = env.get("CC") or shutil.which("gcc", path=env.get("PATH")) or shutil.which("clang", path=env.get("PATH"))
    if not cc:
        return None
    try:
        answer = subprocess.run(
            [cc, f"-print-file-name={name}"], capture_output=True, text=True, timeout=10, env=dict(env)
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return answer if os.path.isabs(answer) and Path(answer).exists() else None


@dataclass(frozen=True, kw_only=True)
class OptionDoc:
    """One option as ``dpbench list`` shows it."""

    name: str
    """The option's name, as a keyword of ``dpbench.launch`` and a key of the resolved dict."""

    default: Any
    """Its value when the run does not set it."""

    doc: str
    """The first line of the field's docstring as plain text ("" when the source cannot be read)."""


def describe_options(options_type: type[CommonOptions]) -> list[OptionDoc]:
    """Every option of ``options_type`` in the resolved dict's order, with its default and one-line doc."""
    docs = field_docs(options_type)
    return [
        OptionDoc(name=name, default=default, doc=_plain(docs.get(name, "").split("\n")[0]))
        for name, default in options_type().as_dict().items()
    ]


def _plain(rst: str) -> str:
    """A terminal has no use for reStructuredText's inline-literal quotes."""
    return rst.replace("``", "")


def field_docs(options_type: type) -> dict[str, str]:
    """Each dataclass field's attribute docstring (the string literal on the line after it).

    Python drops that literal when it runs the class body, so it is read back from the source with
    ``ast``: the text lives once, where editors show it, instead of a second copy in
    ``field(metadata=...)`` that could drift from it. A class whose source cannot be read gives none.
    """
    fields = {field.name for field in dataclasses.fields(options_type)}
    docs: dict[str, str] = {}
    for klass in reversed(options_type.__mro__):  # a subclass's doc wins over its base's
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body
        for node, following in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id in fields
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs
