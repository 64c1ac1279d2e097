"""Typed settings: conf/bkaudit.toml < environment (BKAUDIT_*) < CLI flags.

Each subsystem declares its section as a plain frozen dataclass in its `settings` module; `SECTIONS` below is
the one catalog naming them (no registration on import). Defaults live in the dataclass (one source of truth),
conf/bkaudit.toml documents them, docs/config.md maps them to BookKeeper's keys.

Environment: `BKAUDIT_<SECTION>__<KEY>` (double underscore), e.g. `BKAUDIT_CHECKER__GRACE_PERIOD_S=600`.
Top-level shortcuts: `BKAUDIT_ZK` (ZooKeeper connect string) and `BKAUDIT_ROOT` (ledgers root).
`load` validates every section present in file, environment or flags before returning (pydantic, over the
dataclasses as declared: types, lax coercion of environment strings, then each class's `__post_init__`
checks), so a bad value fails at start-up with one ConfigError naming the key and the reason; unknown keys
and sections are errors too, with a did-you-mean (a typo should not silently fall back to a default).

Rules every section gets on top of its own checks (`_check_bounds`): booleans are strict (a TOML file says
`true` or `false`; text from the environment or a flag may also say yes/no/on/off/1/0, nothing else); numbers
are finite (no nan, no inf); integers fit a Java int (BookKeeper's settings are ints), byte counts (`*_bytes`)
a Java long; durations in seconds (`*_s`) are at most 2^31-1. The settings file must be UTF-8.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import itertools
import math
import os
import tomllib
import types
import typing
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from bkaudit.errors import ConfigError
from bkaudit.zk.settings import ZkSettings

T = TypeVar("T")

__all__ = [  # ZkSettings: the shared [zk]
    "DEFAULT_PATH", "SECTIONS", "Settings", "ZkSettings", "load", "section_from_text", "with_overrides",
]

_SHORTCUTS = {"BKAUDIT_ZK": ("zk", "connect"), "BKAUDIT_ROOT": ("zk", "root")}
TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})
"""How text (environment, flags) spells a boolean; a settings file uses TOML's own true / false."""
INT_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE: BookKeeper's settings are ints ...
LONG_MAX = 2**63 - 1  # ... byte counts are longs
MAX_SECONDS = 2**31 - 1  # the longest duration (68 years)
SECONDS_KEYS = frozenset({"open_ledger_rereplication_grace"})
"""Durations in seconds whose names do not end in `_s` (names fixed by an issue)."""
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "conf" / "bkaudit.toml"

# The catalog: each settings section bkaudit knows, by name, behind a function that imports its frozen
# dataclass, so `import bkaudit.config` imports no subsystem and a section's module is imported when the
# section is first asked for (tests/cli/test_config.py checks every entry). tests/project/test_layering.py
# lets these imports, and only these, reach a layer above: each is a plain declaration.


def _rpc() -> type[Any]:
    from bkaudit.rpc.settings import RpcSettings
    return RpcSettings


def _tables() -> type[Any]:
    from bkaudit.tables.settings import TablesSettings
    return TablesSettings


def _placement() -> type[Any]:
    from bkaudit.audit.settings import PlacementSettings
    return PlacementSettings


def _checker() -> type[Any]:
    from bkaudit.audit.settings import CheckerSettings
    return CheckerSettings


def _client() -> type[Any]:
    from bkaudit.client.settings import ClientSettings
    return ClientSettings


def _bookie() -> type[Any]:
    from bkaudit.bookie.settings import BookieSettings
    return BookieSettings


def _autorecovery() -> type[Any]:
    from bkaudit.autorecovery.settings import AutoRecoverySettings
    return AutoRecoverySettings


def _lifecycle() -> type[Any]:
    from bkaudit.lifecycle.settings import LifecycleSettings
    return LifecycleSettings


def _snapshot() -> type[Any]:
    from bkaudit.spark.settings import SnapshotSettings
    return SnapshotSettings


def _admin() -> type[Any]:
    from bkaudit.admin.settings import AdminSettings
    return AdminSettings


class _Catalog(Mapping[str, type[Any]]):
    """Section name -> class, each class imported when first looked up."""

    def __init__(self, loaders: Mapping[str, typing.Callable[[], type[Any]]]) -> None:
        self._loaders = dict(loaders)

    def __getitem__(self, name: str) -> type[Any]:
        return self._loaders[name]()

    def __iter__(self) -> typing.Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


SECTIONS: Mapping[str, type[Any]] = _Catalog({
    "zk": lambda: ZkSettings,
    "rpc": _rpc,
    "tables": _tables,
    "placement": _placement,
    "checker": _checker,
    "client": _client,
    "bookie": _bookie,
    "autorecovery": _autorecovery,
    "lifecycle": _lifecycle,
    "snapshot": _snapshot,
    "admin": _admin,
})


class Settings:
    """Resolved settings; `settings.get(ZkSettings)` or `settings["zk"]` returns a section instance."""

    def __init__(
        self,
        values: Mapping[str, Mapping[str, Any]],
        source: str,
        *,
        catalog: Mapping[str, type[Any]] = SECTIONS,
        text: frozenset[tuple[str, str]] = frozenset(),
        origins: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self._raw = {k: dict(v) for k, v in values.items()}
        self._text = text  # (section, key) whose value is text from the environment or a flag
        self._origins = dict(origins or {})
        self._cache: dict[str, Any] = {}
        self._catalog = catalog if isinstance(catalog, _Catalog) else dict(catalog)  # lazy, or a copy
        self.source = source

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            ref = self._catalog.get(name)
            if ref is None:
                close = difflib.get_close_matches(name, self._catalog, n=1)
                known = ", ".join(sorted(self._catalog))
                hint = f"did you mean [{close[0]}]?" if close else f"known: {known}"
                raise ConfigError(name, f"unknown configuration section ({hint})")
            text = {key for sec, key in self._text if sec == name}
            self._cache[name] = _build(name, ref, self._raw.get(name, {}), text)
        return self._cache[name]

    def get(self, cls: type[T]) -> T:
        """The section whose class is `cls`, validated from file < environment < flags."""
        return typing.cast(T, self[self.section_name(cls)])

    def section_name(self, cls: type[Any]) -> str:
        """The name `cls` is catalogued under (TypeError for a class that is no settings section)."""
        built = (name for name, section in self._cache.items() if type(section) is cls)
        for name in itertools.chain(built, self._catalog):  # the sections built first: no import for them
            if self._catalog[name] is cls:
                return name
        raise TypeError(f"{cls.__name__} is not a settings section (see bkaudit.config.SECTIONS)")

    def origin(self, section: str, key: str) -> str | None:
        """Where a key's value came from: "file" (a settings file the user chose: --config or $BKAUDIT_CONF),
        "template" (conf/bkaudit.toml, read when none is chosen), "environment" or "flag"; None when unset."""
        return self._origins.get((section, key))

    def raw(self) -> dict[str, dict[str, Any]]:
        """The merged key/values."""
        return {k: dict(v) for k, v in self._raw.items()}

    def redacted(self) -> dict[str, Any]:
        """The merged key/values with every secret masked, at any depth (`[tables] storage_options` holds
        the object store's keys): what a run records of its configuration in its tables."""
        return typing.cast(dict[str, Any], _redact(self.raw()))

    def validate_all(self) -> None:
        """Build every section present in the input (fail fast at start-up, not mid-job)."""
        for name in self._raw:
            self[name]


# key words of settings whose values are secrets (ZooKeeper digest, object-store keys and tokens)
SECRET_WORDS = ("auth", "password", "secret", "token", "credential", "account_key", "private_key", "sas_key")
MASK = "***"


def _redact(value: Any, key: str = "") -> Any:
    if isinstance(value, Mapping):
        return {k: _redact(v, str(k)) for k, v in value.items()}
    if any(word in key.lower() for word in SECRET_WORDS):
        return MASK
    return value


def load(
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    catalog: Mapping[str, type[Any]] = SECTIONS,
) -> Settings:
    """Merge file < environment < overrides ({"section.key": value}); None overrides are ignored.

    `catalog` names the sections that may appear (default: all of bkaudit's, `SECTIONS`).
    """
    environ = os.environ if environ is None else environ
    merged: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}
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
        except UnicodeDecodeError as exc:
            raise ConfigError(str(chosen), f"not UTF-8 (TOML files are): byte {exc.start} is "
                                           f"{exc.object[exc.start:exc.start + 1]!r}") from None
        except OSError as exc:
            raise ConfigError(str(chosen), f"cannot read it: {exc.strerror or exc}") from None
        from_file = "file" if path or env_path else "template"
        for name, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(name, "top-level keys must be [sections]")
            merged.setdefault(name, {}).update(values)
            origins.update({(name, key): from_file for key in values})
    else:
        source = "defaults"
    text: set[tuple[str, str]] = set()
    for var, value in environ.items():
        if var in _SHORTCUTS:
            sec, key = _SHORTCUTS[var]
        elif var.startswith("BKAUDIT_") and "__" in var:
            sec, _, key = var[len("BKAUDIT_") :].partition("__")
            sec, key = sec.lower(), key.lower()
        else:
            continue
        merged.setdefault(sec, {})[key] = value
        text.add((sec, key))
        origins[(sec, key)] = "environment"
    return _overridden(merged, source, catalog, text, origins, overrides or {})


def with_overrides(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """`settings` with a run's own values on top ({"section.key": value}; None keeps the setting), validated
    as `load` validates its overrides: how per-run flags reach a job whose settings were loaded before."""
    return _overridden(settings.raw(), settings.source, settings._catalog, set(settings._text),
                       dict(settings._origins), overrides)


def _overridden(merged: dict[str, dict[str, Any]], source: str, catalog: Mapping[str, type[Any]],
                text: set[tuple[str, str]], origins: dict[tuple[str, str], str], overrides: Mapping[str, Any]
                ) -> Settings:
    """The one place flags land: on top of file and environment, text when they are strings."""
    for dotted, value in overrides.items():
        if value is None:
            continue
        sec, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(dotted, "override keys are 'section.key'")
        merged.setdefault(sec, {})[key] = value
        origins[(sec, key)] = "flag"
        if isinstance(value, str):
            text.add((sec, key))
        else:
            text.discard((sec, key))
    settings = Settings(merged, source, catalog=catalog, text=frozenset(text), origins=origins)
    settings.validate_all()
    return settings


KEY = "key"
"""Field metadata naming the key operators write for a field whose Python name tells it apart from another
section's same key (`dataclasses.field(metadata={KEY: "batch_size"})`); any other field's key is its name."""


def keys_of(cls: type[Any]) -> dict[str, str]:
    """A section's keys -> its fields' names."""
    return {f.metadata.get(KEY, f.name): f.name for f in dataclasses.fields(cls)}


def section_from_text(name: str, cls: type[T], values: Mapping[str, str]) -> T:
    """Section `name` (class `cls`) from text values, spelt as the environment spells them and validated as
    `load` validates them: how settings that crossed a boundary as strings (a Spark data source's options)
    are read back."""
    return typing.cast(T, _build(name, cls, values, frozenset(values)))


def _build(name: str, cls: type[Any], values: Mapping[str, Any], text: set[str] | frozenset[str] = frozenset()
           ) -> Any:
    """Validate one section with pydantic (types, coercion of environment strings, the class's own checks),
    then the bounds every section shares (`_check_bounds`). `text`: keys whose value is text from the
    environment or a flag (the spellings of booleans text may use)."""
    from pydantic import ValidationError

    keys = keys_of(cls)
    for key in values:
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(keys))}"
            raise ConfigError(f"{name}.{key}", f"unknown key ({hint})")
    hints = typing.get_type_hints(cls)
    prepared: dict[str, Any] = {}
    for key, value in values.items():
        field = keys[key]
        value = _prepare(hints[field], value)
        prepared[field] = _strict_bool(f"{name}.{key}", hints[field], value, key in text)
        _check_number(f"{name}.{key}", key, prepared[field])
    try:
        section = _adapter(typing.cast(Hashable, cls)).validate_python(prepared)
    except ValidationError as exc:
        raise _config_error(name, exc, {field: key for key, field in keys.items()}) from None
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(name, str(exc)) from None
    for key, field in keys.items():
        _check_number(f"{name}.{key}", key, getattr(section, field))
    return section


def _strict_bool(key: str, hint: Any, value: Any, is_text: bool) -> Any:
    """A boolean setting takes a boolean: TOML's true / false, or (text from the environment or a flag)
    true/false/yes/no/on/off/1/0. pydantic's lax mode would also take "y", "t", 1.0 or a TOML string "yes"."""
    if hint is not bool and hint != (bool | None):
        return value
    if value is None or isinstance(value, bool):
        return value
    if is_text and isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ConfigError(key, f"must be true or false (or yes/no, on/off, 1/0), got {value!r}")
    raise ConfigError(key, f"must be a boolean, true or false, got {value!r}")


def _check_number(key: str, name: str, value: Any) -> None:
    """Finite numbers; integers within a Java int (byte counts: a Java long); durations at most 2^31-1 s."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    if name.endswith("_s") or name in SECONDS_KEYS:
        if abs(value) > MAX_SECONDS:
            raise ConfigError(key, f"must be at most {MAX_SECONDS} seconds, got {value!r}")
    elif isinstance(value, int):
        bound = LONG_MAX if name.endswith("_bytes") else INT_MAX
        if not -bound - 1 <= value <= bound:
            raise ConfigError(key, f"must be within [{-bound - 1}, {bound}], got {value}")


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


def _config_error(name: str, exc: Any, key_of: Mapping[str, str]) -> ConfigError:
    """The first problem of a pydantic ValidationError as one ConfigError naming the key (`key_of`: field
    name -> key)."""
    err = exc.errors(include_url=False)[0]
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, ConfigError):  # raised by the section's own __post_init__ checks
        return original
    parts = [str(part) for part in err.get("loc", ()) if not isinstance(part, int)]
    loc = ".".join(key_of.get(part, part) for part in parts)
    key = f"{name}.{loc}" if loc else name
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if loc and "input" in err:
        message += f", got {err['input']!r}"
    return ConfigError(key, message)


NO_WAREHOUSE = "no warehouse given: use --warehouse DIR, [snapshot] warehouse or BKAUDIT_SNAPSHOT__WAREHOUSE"


def warehouse(settings: Settings, given: str | None = None, *, admin: bool = False) -> str:
    """The Delta warehouse, the one rule for every command: `given` (a job's own argument), else `[snapshot]
    warehouse` (where --warehouse flags land); ConfigError when none names one.

    `admin`: the admin server's rule, which reads `[admin] warehouse` (its --warehouse) first, so the settings
    files that set it keep working, and serves without a warehouse ("" then: the verdict routes say none is
    configured)."""
    if admin:
        return str(settings["admin"].warehouse or settings["snapshot"].warehouse)
    chosen = given or str(settings["snapshot"].warehouse)
    if not chosen:
        raise ConfigError("snapshot.warehouse", NO_WAREHOUSE)
    return chosen
