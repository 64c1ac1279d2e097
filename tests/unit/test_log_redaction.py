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
