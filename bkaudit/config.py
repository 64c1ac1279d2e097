"""Typed settings: conf/bkaudit.toml < environment (BKAUDIT_*) < CLI flags.

Each subsystem declares its section as a frozen dataclass decorated with `@section("name")`; defaults live
there (one source of truth), conf/bkaudit.toml documents them, docs/config.md maps them to BookKeeper's keys.

Environment: `BKAUDIT_<SECTION>__<KEY>` (double underscore), e.g. `BKAUDIT_CHECKER__GRACE_PERIOD_S=600`.
Top-level shortcuts: `BKAUDIT_ZK` (ZooKeeper connect string) and `BKAUDIT_ROOT` (ledgers root).
`load` validates every section present in file, environment or flags before returning (pydantic, over the
dataclasses as declared: types, lax coercion of environment strings, then each class's `__post_init__`
checks), so a bad value fails at start-up with one ConfigError naming the key and the reason; unknown keys
and sections are errors too, with a did-you-mean (a typo should not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.util
import os
import pkgutil
import tomllib
import types
import typing
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from bkaudit.errors import ConfigError

T = TypeVar("T")

_SECTIONS: dict[str, type[Any]] = {}
_SHORTCUTS = {"BKAUDIT_ZK": ("zk", "connect"), "BKAUDIT_ROOT": ("zk", "root")}
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "conf" / "bkaudit.toml"


def section(name: str) -> Callable[[type[T]], type[T]]:
    """Register a frozen dataclass as the settings section `name`."""

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass")
        _SECTIONS[name] = cls
        cls.__config_section__ = name  # type: ignore[attr-defined]
        return cls

    return register


# sections registered outside a subsystem's `settings` module (those are found by name, see _discover)
SECTION_MODULES = {"placement": "bkaudit.model.placement"}


def _discover(name: str) -> type[Any] | None:
    """The class of section `name`, importing the module that registers it when nobody has yet.

    Lets `load` validate every section of a file at start-up, not when (or if) a command first reads it.
    """
    if name in _SECTIONS:
        return _SECTIONS[name]
    if name in SECTION_MODULES:
        importlib.import_module(SECTION_MODULES[name])
    if name not in _SECTIONS:
        import bkaudit

        for info in pkgutil.iter_modules(bkaudit.__path__):
            if info.ispkg and importlib.util.find_spec(f"bkaudit.{info.name}.settings") is not None:
                importlib.import_module(f"bkaudit.{info.name}.settings")
    return _SECTIONS.get(name)


def sections() -> Mapping[str, type[Any]]:
    """Registered sections (import the subsystem modules first to register theirs)."""
    return dict(_SECTIONS)


@section("zk")
@dataclasses.dataclass(frozen=True)
class ZkSettings:
    """ZooKeeper connection shared by every part."""

    connect: str = "127.0.0.1:2181"
    root: str = "/ledgers"
    session_timeout_s: float = 30.0
    connect_timeout_s: float = 15.0
    # digest authentication ("user:password") and CREATOR_ALL ACLs, as BookKeeper's zkEnableSecurity
    auth_digest: str = dataclasses.field(default="", repr=False)  # a secret: never in repr() or tracebacks
    enable_security: bool = False
    # ledger manager layout for writing new ledgers: hierarchical | longhierarchical | legacyhierarchical
    layout: str = "hierarchical"
    # bkaudit's own znodes (data-loss records), outside the ledgers root so BookKeeper's nukeexistingcluster
    # is not blocked; "" = "/bkaudit" + root (e.g. /bkaudit/ledgers)
    state_root: str = ""

    def __post_init__(self) -> None:
        if not self.connect.strip():
            raise ConfigError("zk.connect", "must not be empty")
        if not self.root.startswith("/") or (len(self.root) > 1 and self.root.endswith("/")):
            raise ConfigError("zk.root", f"must be an absolute path without trailing '/', got {self.root!r}")
        if self.session_timeout_s <= 0:
            raise ConfigError("zk.session_timeout_s", "must be > 0")
        if self.layout not in ("hierarchical", "longhierarchical", "legacyhierarchical"):
            raise ConfigError("zk.layout", f"unknown ledger layout {self.layout!r}")
        if self.auth_digest and ":" not in self.auth_digest:
            raise ConfigError("zk.auth_digest", "must be 'user:password'")
        if self.auth_digest:  # from now on this process's log lines never show it (py4j logs Spark options)
            from bkaudit.logs import register_secret

            register_secret(self.auth_digest.split(":", 1)[1])
        if self.state_root:
            from bkaudit.zk.paths import validate_state_root

            try:
                validate_state_root(self.state_root, root=self.root)
            except ValueError as exc:
                raise ConfigError("zk.state_root", str(exc)) from None


class Settings:
    """Resolved settings; `settings.get(ZkSettings)` or `settings["zk"]` returns a section instance."""

    def __init__(self, values: Mapping[str, Mapping[str, Any]], source: str) -> None:
        self._raw = {k: dict(v) for k, v in values.items()}
        self._cache: dict[str, Any] = {}
        self.source = source

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            cls = _discover(name)
            if cls is None:
                close = difflib.get_close_matches(name, _SECTIONS, n=1)
                hint = f"did you mean [{close[0]}]?" if close else f"known: {', '.join(sorted(_SECTIONS))}"
                raise ConfigError(name, f"unknown configuration section ({hint})")
            self._cache[name] = _build(name, cls, self._raw.get(name, {}))
        return self._cache[name]

    def get(self, cls: type[T]) -> T:
        name = getattr(cls, "__config_section__", None)
        if name is None:
            raise TypeError(f"{cls.__name__} is not a registered settings section")
        return typing.cast(T, self[name])

    def raw(self) -> dict[str, dict[str, Any]]:
        """The merged key/values (for recording a run's configuration)."""
        return {k: dict(v) for k, v in self._raw.items()}

    def validate_all(self) -> None:
        """Build every section present in the input (fail fast at start-up, not mid-job)."""
        for name in self._raw:
            self[name]


def load(
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge file < environment < overrides ({"section.key": value}); None overrides are ignored."""
    environ = os.environ if environ is None else environ
    merged: dict[str, dict[str, Any]] = {}
    env_path = environ.get("BKAUDIT_CONF")
    chosen = Path(path) if path else Path(env_path) if env_path else DEFAULT_PATH
    source = str(chosen)
    if (path or environ.get("BKAUDIT_CONF")) and not chosen.is_file():
        raise ConfigError("BKAUDIT_CONF" if not path else "--config", f"no such file: {chosen}")
    if chosen.is_file():
        try:
            data = tomllib.loads(chosen.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(chosen), f"not valid TOML: {exc}") from exc
        for name, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(name, "top-level keys must be [sections]")
            merged.setdefault(name, {}).update(values)
    else:
        source = "defaults"
    for var, value in environ.items():
        if var in _SHORTCUTS:
            sec, key = _SHORTCUTS[var]
            merged.setdefault(sec, {})[key] = value
        elif var.startswith("BKAUDIT_") and "__" in var:
            sec, _, key = var[len("BKAUDIT_") :].partition("__")
            merged.setdefault(sec.lower(), {})[key.lower()] = value
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        sec, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(dotted, "override keys are 'section.key'")
        merged.setdefault(sec, {})[key] = value
    settings = Settings(merged, source)
    settings.validate_all()
    return settings


def _build(name: str, cls: type[Any], values: Mapping[str, Any]) -> Any:
    """Validate one section with pydantic (types, coercion of environment strings, the class's own checks)."""
    from pydantic import ValidationError

    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(fields))}"
            raise ConfigError(f"{name}.{key}", f"unknown key ({hint})")
    hints = typing.get_type_hints(cls)
    prepared = {key: _prepare(hints[key], value) for key, value in values.items()}
    try:
        return _adapter(typing.cast(Hashable, cls)).validate_python(prepared)
    except ValidationError as exc:
        raise _config_error(name, exc) from None
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(name, str(exc)) from None


@functools.cache
def _adapter(cls: Any) -> Any:
    from pydantic import ConfigDict, TypeAdapter

    # numbers are accepted where text is expected (`connect = 2181` is a host's port, not a type error)
    cls.__pydantic_config__ = ConfigDict(extra="forbid", coerce_numbers_to_str=True)
    return TypeAdapter(cls)


def _prepare(hint: Any, value: Any) -> Any:
    """Environment and flag spellings pydantic does not know: "a,b" lists, "none" for optional values."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _prepare(args[0], value) if len(args) == 1 else value
    if origin in (tuple, list) and isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _config_error(name: str, exc: Any) -> ConfigError:
    """The first problem of a pydantic ValidationError as one ConfigError naming the key."""
    err = exc.errors(include_url=False)[0]
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, ConfigError):  # raised by the section's own __post_init__ checks
        return original
    loc = ".".join(str(part) for part in err.get("loc", ()) if not isinstance(part, int))
    key = f"{name}.{loc}" if loc else name
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if loc and "input" in err:
        message += f", got {err['input']!r}"
    return ConfigError(key, message)
