"""Log lines never carry secrets: kazoo's request/response dumps lose their payload, registered secrets are
replaced wherever a library logs them."""

from __future__ import annotations

import logging

import pytest
from kazoo.protocol.serialization import Auth, Create

from bkaudit import logs


@pytest.fixture
def kazoo_lines(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    logs.install_kazoo_filter()
    logs.install_kazoo_filter()  # idempotent
    assert sum(isinstance(f, logs.KazooWireFilter) for f in logging.getLogger("kazoo.client").filters) == 1
    caplog.set_level(logging.DEBUG, logger="kazoo.client")
    return caplog


def test_kazoo_request_and_response_payloads_are_dropped(kazoo_lines: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("kazoo.client")
    log.debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", "user:hunter2-password"))
    log.debug("Sending request(xid=%s): %s", 7, Create("/ledgers/L1", b"password: hunter3", [], 0))
    log.debug("Received response(xid=%s): %r", 8, (b'{"secret": "hunter4"}', None))
    log.debug("Connecting to %s:%s", "127.0.0.1", 2181)  # other kazoo lines untouched
    text = "\n".join(r.getMessage() for r in kazoo_lines.records)
    assert "hunter" not in text
    assert "Sending request(xid=-4): Auth(<redacted>)" in text
    assert "Create(path='/ledgers/L1', <redacted>)" in text
    assert "Received response(xid=8): tuple(<redacted>)" in text
    assert "Connecting to 127.0.0.1:2181" in text


def test_registered_secrets_are_replaced_in_any_record(caplog: pytest.LogCaptureFixture) -> None:
    logs.register_secret("s3cr3t-zk-password")
    logs.register_secret("ab")  # too short to redact safely: ignored
    caplog.set_level(logging.INFO, logger="some.library")
    logging.getLogger("some.library").info("connecting with %s to %s", "user:s3cr3t-zk-password", "ab-host")
    assert caplog.records[-1].getMessage() == "connecting with user:<redacted> to ab-host"


def test_verbose_commands_get_a_stderr_handler(capsys: pytest.CaptureFixture[str]) -> None:
    """`bkaudit -v CMD`: without a handler Python would print WARNING and above only (logging.lastResort)."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for h in saved:
        root.removeHandler(h)
    try:
        logs.configure(1)
        logging.getLogger("bkaudit.something").info("an info line")
        logs.configure(1)  # a second call adds no second handler
        assert len(root.handlers) == 1
        assert capsys.readouterr().err.count("INFO MainThread bkaudit.something: an info line") == 1
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
        root.setLevel(level)
        logs.configure(0)
        root.setLevel(level)


def test_zk_settings_with_a_digest_register_its_password_and_hide_it_from_repr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from bkaudit.config import ZkSettings

    settings = ZkSettings(auth_digest="bkaudit:settings-pw-0123")
    assert "settings-pw-0123" not in repr(settings)
    caplog.set_level(logging.DEBUG, logger="py4j.clientserver")
    py4j = logging.getLogger("py4j.clientserver")  # what py4j logs for a Spark DataSource option
    py4j.debug("Command to send: c\noption\nsauth_digest_secret\nsbkaudit:%s\n", "settings-pw-0123")
    assert "settings-pw-0123" not in caplog.text and "sbkaudit:<redacted>" in caplog.text


def test_a_registered_secret_inside_a_kazoo_payload_still_loses_the_whole_payload(
    kazoo_lines: pytest.LogCaptureFixture,
) -> None:
    logs.register_secret("s3cr3t-token")  # a secret registered earlier must not pre-format the wire line
    logging.getLogger("kazoo.client").debug(
        "Received response(xid=%s): %r", 9, (b'{"s3cr3t-token": "hunter5"}', None)
    )
    text = "\n".join(r.getMessage() for r in kazoo_lines.records)
    assert "hunter5" not in text and "s3cr3t-token" not in text
    assert "Received response(xid=9)" in text


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_a_pickled_closure_sent_through_py4j_loses_its_base64_at_any_alignment(
    caplog: pytest.LogCaptureFixture, pad: int
) -> None:
    """Spark sends pickled Python functions to the JVM as py4j bytes arguments (base64 on one line), and py4j
    logs every command at DEBUG: a closure holding the ZooKeeper digest put it in the log in base64, which
    the plain-text replacement cannot see (found by tests/security/test_no_secret_leaks.py, one run in
    three: base64 shows the secret only when it starts at a multiple of 3 bytes)."""
    import base64
    import pickle

    secret = "closure-zk-pw-7f3a9c"
    logs.register_secret(secret)
    payload = b"x" * pad + pickle.dumps({"auth_digest_secret": f"bkaudit:{secret}"})
    encoded = base64.b64encode(payload).decode("ascii")
    # base64 of the secret as it appears at each of the 3 byte alignments; exactly one is inside `encoded`
    needles = {base64.b64encode(secret.encode()[k:])[:16].decode() for k in range(3)}
    assert sum(n in encoded for n in needles) == 1
    caplog.set_level(logging.DEBUG, logger="py4j.clientserver")
    command = f"i\norg.apache.spark.api.python.SimplePythonFunction\nj{encoded}\nsPYTHONHASHSEED\ne\n"
    logging.getLogger("py4j.clientserver").debug(f"Command to send: {command}")  # as py4j logs it
    text = caplog.text
    assert not any(n in text for n in needles)
    assert "SimplePythonFunction" in text and "sPYTHONHASHSEED" in text
    assert f"j{logs.REDACTED} ({len(encoded)} base64 chars)" in text
