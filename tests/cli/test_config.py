"""Settings: validated at start-up (pydantic over the catalogued dataclass sections); file < env < flags."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from bkaudit import config
from bkaudit.errors import ConfigError


def conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bkaudit.toml"
    path.write_text(text)
    return path


def test_a_bad_value_fails_at_load_not_at_first_use(tmp_path: Path) -> None:
    path = conf(tmp_path, '[checker]\ncall_timeout_s = "abc"\n')
    with pytest.raises(ConfigError) as err:
        config.load(path=path, environ={})  # nothing asks for [checker] yet
    assert err.value.key == "checker.call_timeout_s" and "'abc'" in str(err.value)


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("[checker]\ncall_timeout = 5\n", "checker.call_timeout", "did you mean 'call_timeout_s'"),
        ("[checkr]\nfail_on = 'never'\n", "checkr", "did you mean [checker]"),
        ("[zk]\nsession_timeout_s = -1\n", "zk.session_timeout_s", "must be > 0"),
        ("[checker]\nretry_attempts = 1.5\n", "checker.retry_attempts", "1.5"),
        ("[snapshot]\nvalidate = 'maybe'\n", "snapshot.validate", "'maybe'"),
        ("[placement]\nlocations = 'x'\n", "placement.locations", "'x'"),
    ],
)
def test_errors_name_the_key_in_one_line(tmp_path: Path, text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(path=conf(tmp_path, text), environ={})
    assert err.value.key == key and says in str(err.value)
    assert "\n" not in str(err.value)


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    from bkaudit.audit.settings import CheckerSettings

    path = conf(tmp_path, "[checker]\ncall_timeout_s = 1\nretry_attempts = 4\nbatch_size = 7\n")
    loaded = config.load(path=path, environ={"BKAUDIT_CHECKER__CALL_TIMEOUT_S": "2",
                                              "BKAUDIT_CHECKER__RETRY_ATTEMPTS": "5"},
                         overrides={"checker.call_timeout_s": 3.5, "checker.batch_size": None})
    section = loaded.get(CheckerSettings)
    assert section.call_timeout_s == 3.5  # flag over environment over file
    assert section.retry_attempts == 5  # environment over file
    assert section.batch_size == 7  # a None flag leaves the file's value


def test_each_value_knows_where_it_came_from(tmp_path: Path) -> None:
    path = conf(tmp_path, '[zk]\nconnect = "a:1"\nroot = "/x"\n[checker]\nbatch_size = 7\n')
    loaded = config.load(path=path, environ={"BKAUDIT_ZK__ROOT": "/y"}, overrides={"checker.batch_size": 9})
    where = [("zk", "connect"), ("zk", "root"), ("checker", "batch_size"), ("checker", "call_timeout_s")]
    assert [loaded.origin(*key) for key in where] == ["file", "environment", "flag", None]
    by_env = config.load(environ={"BKAUDIT_CONF": str(path)})
    assert by_env.origin("zk", "connect") == "file"  # chosen through $BKAUDIT_CONF
    shipped = config.load(environ={})  # conf/bkaudit.toml, read when nothing is chosen: a template
    assert shipped.origin("zk", "connect") == "template"


def test_environment_spellings_are_coerced(tmp_path: Path) -> None:
    from bkaudit.audit.settings import PlacementSettings

    loaded = config.load(path=conf(tmp_path, ""), environ={
        "BKAUDIT_PLACEMENT__ENFORCE_MIN_RACKS": "yes",
        "BKAUDIT_PLACEMENT__REGIONS_TO_WRITE": "east, west",
        "BKAUDIT_PLACEMENT__POLICY": "regionaware",
    })
    section = loaded.get(PlacementSettings)
    assert section.enforce_min_racks is True and section.regions_to_write == ("east", "west")


def test_a_section_added_to_the_catalog_is_validated_the_same_way(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True)
    class Widgets:
        count: int = 1
        names: tuple[str, ...] = ()
        label: str | None = None

        def __post_init__(self) -> None:
            if self.count > 10:
                raise ConfigError("test_widgets.count", "at most 10")

    catalog = {**config.SECTIONS, "test_widgets": Widgets}
    ok = config.load(path=conf(tmp_path, "[test_widgets]\ncount = '3'\nnames = ['a']\nlabel = 'none'\n"),
                     environ={}, catalog=catalog)
    assert ok.get(Widgets) == Widgets(count=3, names=("a",), label=None)
    with pytest.raises(ConfigError, match="at most 10"):
        config.load(path=conf(tmp_path, "[test_widgets]\ncount = 11\n"), environ={}, catalog=catalog)
    with pytest.raises(ConfigError, match=r"test_widgets\.count"):
        config.load(path=conf(tmp_path, "[test_widgets]\ncount = 'many'\n"), environ={}, catalog=catalog)
    with pytest.raises(ConfigError, match="unknown configuration section"):  # not in bkaudit's own catalog
        config.load(path=conf(tmp_path, "[test_widgets]\ncount = 3\n"), environ={})


def test_every_catalogued_section_resolves_to_its_dataclass() -> None:
    settings = config.load(path=config.DEFAULT_PATH, environ={})
    for name, cls in config.SECTIONS.items():
        assert dataclasses.is_dataclass(cls), name
        assert settings.section_name(cls) == name
        assert settings.get(cls) == settings[name]


def test_a_class_outside_the_catalog_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Stray:
        x: int = 0

    with pytest.raises(TypeError, match="not a settings section"):
        config.load(environ={}).get(Stray)


def test_importing_config_imports_no_subsystem() -> None:
    """The catalog imports a section's module when the section is first asked for: importing config imports
    nothing (no registration, no side effect on import)."""
    code = ("import sys, bkaudit.config; "
            "print(sorted(m for m in sys.modules if m.startswith('bkaudit.') and m.count('.') >= 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(ast.literal_eval(out))
    allowed = {"bkaudit.config", "bkaudit.errors", "bkaudit.zk", "bkaudit.zk.settings", "bkaudit.zk.paths"}
    assert loaded <= allowed, loaded


def test_the_shipped_file_is_valid() -> None:
    config.load(path=config.DEFAULT_PATH, environ={})


def test_one_rule_for_the_warehouse(tmp_path: Path) -> None:
    """A job's own argument wins over [snapshot] warehouse (where --warehouse flags land); none is a
    settings error naming the key and every way to give one."""
    empty = config.load(path=conf(tmp_path, ""), environ={})
    with pytest.raises(ConfigError) as err:
        config.warehouse(empty)
    assert err.value.key == "snapshot.warehouse" and "--warehouse" in str(err.value)
    assert "BKAUDIT_SNAPSHOT__WAREHOUSE" in str(err.value)
    from_env = config.load(path=conf(tmp_path, ""), environ={"BKAUDIT_SNAPSHOT__WAREHOUSE": "/wh/env"})
    assert config.warehouse(from_env) == "/wh/env"
    assert config.warehouse(from_env, "/wh/job") == "/wh/job"
    flagged = config.load(path=conf(tmp_path, '[snapshot]\nwarehouse = "/wh/file"\n'), environ={},
                          overrides={"snapshot.warehouse": "s3a://b/wh"})
    assert config.warehouse(flagged) == "s3a://b/wh"


def test_the_admin_server_reads_admin_warehouse_first(tmp_path: Path) -> None:
    """`admin serve`: [admin] warehouse (its --warehouse) before [snapshot] warehouse; none is no error."""
    both = conf(tmp_path, '[snapshot]\nwarehouse = "/wh/snap"\n[admin]\nwarehouse = "/wh/admin"\n')
    assert config.warehouse(config.load(path=both, environ={}), admin=True) == "/wh/admin"
    assert config.warehouse(config.load(path=both, environ={}, overrides={"admin.warehouse": "/wh/flag"}),
                            admin=True) == "/wh/flag"
    snap_only = config.load(path=conf(tmp_path, '[snapshot]\nwarehouse = "/wh/snap"\n'), environ={})
    assert config.warehouse(snap_only, admin=True) == "/wh/snap"
    assert config.warehouse(config.load(path=conf(tmp_path, ""), environ={}), admin=True) == ""


def test_a_runs_flags_are_overrides_on_loaded_settings(tmp_path: Path) -> None:
    """`with_overrides`: the flags of a run on top of settings loaded before, as `load` applies them."""
    loaded = config.load(path=conf(tmp_path, '[checker]\nfail_on = "warning"\nmetrics_file = "/m.prom"\n'),
                         environ={})
    run = config.with_overrides(loaded, {"checker.fail_on": "never", "checker.metrics_file": "",
                                         "checker.publish_placement": None})
    assert run["checker"].fail_on == "never" and run["checker"].metrics_file == ""
    assert run["checker"].publish_placement is False and run.origin("checker", "fail_on") == "flag"
    assert loaded["checker"].fail_on == "warning"  # the loaded settings are left as they were
    text = config.with_overrides(loaded, {"checker.publish_underreplicated": "yes"})
    assert text["checker"].publish_underreplicated is True
    with pytest.raises(ConfigError) as err:
        config.with_overrides(loaded, {"checker.fail_on": "sometimes"})
    assert err.value.key == "checker.fail_on"


def test_a_field_renamed_in_code_keeps_its_key(tmp_path: Path) -> None:
    """[snapshot] batch_size (ledgers per Arrow batch) is `ledgers_per_batch` in code, apart from [checker]
    batch_size (ledgers per listing call): operators write, and errors name, the key."""
    from_file = config.load(path=conf(tmp_path, "[snapshot]\nbatch_size = 5\n"), environ={})
    assert from_file["snapshot"].ledgers_per_batch == 5 and from_file["checker"].batch_size == 500
    from_env = config.load(path=conf(tmp_path, ""), environ={"BKAUDIT_SNAPSHOT__BATCH_SIZE": "7"})
    assert from_env["snapshot"].ledgers_per_batch == 7
    for text, key, why in (("batch_size = 0", "snapshot.batch_size", "must be >= 1"),
                           ("batch_size = 'x'", "snapshot.batch_size", "integer"),
                           ("ledgers_per_batch = 5", "snapshot.ledgers_per_batch", "unknown key")):
        with pytest.raises(ConfigError) as err:
            config.load(path=conf(tmp_path, f"[snapshot]\n{text}\n"), environ={})
        assert err.value.key == key and why in str(err.value)


def test_a_section_is_imported_when_first_asked_for(tmp_path: Path) -> None:
    """Loading a file with only [zk] and reading it imports no other section's module."""
    path = conf(tmp_path, "[zk]\nconnect = 'zk1:2181'\n")
    code = (f"import sys, bkaudit.config as c; s = c.load(path={str(path)!r}, environ={{}}); "
            "s.get(c.ZkSettings); print(sorted(m for m in sys.modules if m.endswith('.settings')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert ast.literal_eval(out) == ["bkaudit.zk.settings"]
