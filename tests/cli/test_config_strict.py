"""Settings the issue found accepted or mis-coded (issue 32 item 8): each is a ConfigError naming the key
(exit 2 at the CLI), whether it comes from the settings file or the environment.

- booleans are strict: TOML's true/false in a file; text (environment, flags) may say yes/no/on/off/1/0;
- numbers are finite (nan, inf), integers fit a Java int (byte counts a Java long), durations <= 2^31-1 s;
- the settings file must be UTF-8; the ledgers root a plain absolute path (`/a/../b` refused);
- TLS files that cannot be read are ConfigErrors when the TLS material is built, naming their key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bkaudit import config
from bkaudit.errors import ConfigError


def conf(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "bkaudit.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ('[zk]\nenable_security = "yes"\n', "zk.enable_security", "must be a boolean"),
        ("[zk]\nenable_security = 1\n", "zk.enable_security", "must be a boolean"),
        ('[bookie]\nrequire_tls = "true"\n', "bookie.require_tls", "must be a boolean"),
        ("[zk]\nsession_timeout_s = nan\n", "zk.session_timeout_s", "finite"),
        ("[zk]\nconnect_timeout_s = inf\n", "zk.connect_timeout_s", "finite"),
        ("[checker]\ncall_timeout_s = -inf\n", "checker.call_timeout_s", "finite"),
        ("[placement]\nmin_zones = 99999999999999999999999\n", "placement.min_zones", "within"),
        ("[checker]\nbatch_size = 4294967296\n", "checker.batch_size", "within"),
        ("[bookie]\nlisting_cache_bytes = 99999999999999999999\n", "bookie.listing_cache_bytes", "within"),
        ("[checker]\ncall_timeout_s = 1e300\n", "checker.call_timeout_s", "at most 2147483647 seconds"),
        ("[autorecovery]\nopen_ledger_rereplication_grace = 1e12\n",
         "autorecovery.open_ledger_rereplication_grace", "seconds"),
        ('[zk]\nroot = "/a/../b"\n', "zk.root", "'..'"),
        ('[zk]\nroot = "/ledgers//x"\n', "zk.root", "empty"),
        ('[zk]\nroot = "/led\\u0001gers"\n', "zk.root", "control characters"),
    ],
)
def test_file_values_refused_with_the_key(tmp_path: Path, text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(path=conf(tmp_path, text), environ={})
    assert err.value.key == key and says in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("env", "key", "says"),
    [
        ({"BKAUDIT_ZK__SESSION_TIMEOUT_S": "nan"}, "zk.session_timeout_s", "finite"),
        ({"BKAUDIT_RPC__REQUEST_TIMEOUT_S": "inf"}, "rpc.request_timeout_s", "finite"),
        ({"BKAUDIT_ZK__ENABLE_SECURITY": "y"}, "zk.enable_security", "true or false"),
        ({"BKAUDIT_ZK__ENABLE_SECURITY": "enabled"}, "zk.enable_security", "true or false"),
        ({"BKAUDIT_CHECKER__BATCH_SIZE": "1" + "0" * 30}, "checker.batch_size", "within"),
        ({"BKAUDIT_ROOT": "/a/../b"}, "zk.root", "'..'"),
    ],
)
def test_environment_values_refused_with_the_key(tmp_path: Path, env: dict[str, str], key: str,
                                                  says: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(path=conf(tmp_path, ""), environ=env)
    assert err.value.key == key and says in str(err.value), str(err.value)


def test_text_spellings_of_booleans_still_work_where_text_is_all_there_is(tmp_path: Path) -> None:
    from bkaudit.config import ZkSettings

    for word, value in (("yes", True), ("ON", True), ("1", True), ("no", False), ("off", False),
                        ("false", False)):
        loaded = config.load(path=conf(tmp_path, ""), environ={"BKAUDIT_ZK__ENABLE_SECURITY": word})
        assert loaded.get(ZkSettings).enable_security is value, word
    flagged = config.load(path=conf(tmp_path, '[zk]\nenable_security = true\n'), environ={},
                          overrides={"zk.enable_security": "no"})
    assert flagged.get(ZkSettings).enable_security is False
    typed = config.load(path=conf(tmp_path, "[zk]\nenable_security = true\nsession_timeout_s = 45\n"),
                        environ={})
    assert typed.get(ZkSettings).enable_security is True and typed.get(ZkSettings).session_timeout_s == 45.0


def test_a_settings_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = conf(tmp_path, b'[zk]\nroot = "/l\xe9dgers"\n')  # Latin-1
    with pytest.raises(ConfigError, match="not UTF-8") as err:
        config.load(path=path, environ={})
    assert err.value.key == str(path)


def test_tls_files_that_cannot_be_read_are_config_errors(tmp_path: Path) -> None:
    from bkaudit.rpc.tls import TlsConfig, server_ssl_context

    missing = str(tmp_path / "nope.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    for text, key in ((f'[rpc]\ntls_ca = "{missing}"\n', "rpc.tls_ca"),
                      (f'[rpc]\ntls_ca = "{garbage}"\n', "rpc.tls_ca"),
                      (f'[rpc]\ntls_cert = "{garbage}"\ntls_key = "{missing}"\n', "rpc.tls_key")):
        settings = config.load(path=conf(tmp_path, text), environ={})
        with pytest.raises(ConfigError) as err:
            TlsConfig.from_settings(settings)  # at start-up, not as every bookie UNAVAILABLE later
        assert err.value.key == key, str(err.value)
    with pytest.raises(ConfigError) as err:
        server_ssl_context(str(garbage), missing)
    assert err.value.key == "bookie.tls_key"
