"""Where a BookKeeper bookie's HTTP admin API is, from its registration (HttpService.publishInfo)."""

from __future__ import annotations

import pytest

from bkaudit.formats import records
from bkaudit.lifecycle import serving

PATH = "/api/v1/bookie/state/readonly"  # HttpRouter.BOOKIE_STATE_READONLY


def info(*http: tuple[str, int], rpc_host: str = "10.0.0.7", props: dict[str, str] | None = None):
    extra = tuple(records.Endpoint("httpserver", port, host, "http") for host, port in http)
    return records.bookie_service_info_for("bk-7", rpc_host, 3181, extra_endpoints=extra, properties=props)


@pytest.mark.parametrize(("http", "rpc_host", "url"), [
    (("10.0.0.9", 8080), "10.0.0.7", f"http://10.0.0.9:8080{PATH}"),
    (("0.0.0.0", 8000), "10.0.0.7", f"http://10.0.0.7:8000{PATH}"),  # httpServerHost's default: a wildcard
    (("::", 8000), "bookie-7.example", f"http://bookie-7.example:8000{PATH}"),
    (("::1", 8000), "10.0.0.7", f"http://[::1]:8000{PATH}"),
    (("0.0.0.0", 8000), "fd00::7", f"http://[fd00::7]:8000{PATH}"),
    (("0.0.0.0", 8000), "0.0.0.0", None),  # nowhere to go
])
def test_readonly_url(http, rpc_host, url) -> None:
    assert serving.readonly_url(info(http, rpc_host=rpc_host)) == url


def test_no_http_endpoint_and_the_first_one_wins() -> None:
    assert serving.readonly_url(info()) is None  # httpServerEnabled=false (BookKeeper's default)
    assert serving.readonly_url(info(("10.0.0.1", 1), ("10.0.0.2", 2))) == f"http://10.0.0.1:1{PATH}"
    legacy = records.parse_bookie_service_info(b"", "10.0.0.7:3181")  # an empty registration: rpc only
    assert serving.readonly_url(legacy) is None and not serving.follows_state(legacy)


def test_a_bkaudit_bookie_follows_its_state_itself() -> None:
    assert serving.follows_state(info(props={"bkaudit.version": "1.0"}))
    assert not serving.follows_state(info(("0.0.0.0", 8000)))


def test_check_as_progress_fields() -> None:
    ok = serving.ServingCheck("b", serving.Serving.MADE_READ_ONLY, url="http://h:1" + PATH)
    assert ok.ok and ok.to_dict() == {"serving": "made_read_only", "serving_url": "http://h:1" + PATH}
    stuck = serving.ServingCheck("b", serving.Serving.WRITABLE, "no http endpoint", permanent=True)
    assert not stuck.ok and stuck.to_dict() == {"serving": "writable", "serving_error": "no http endpoint"}
    assert all(serving.ServingCheck("b", s).ok for s in serving.Serving if s is not serving.Serving.WRITABLE)
