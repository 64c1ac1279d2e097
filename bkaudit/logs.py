"""How chatty a bkaudit process is: quiet by default, more with -v / -vv (or BKAUDIT_LOG_LEVEL).

By default only bkaudit's own warnings and errors reach stderr; the libraries' routine chatter (kazoo's
"Connection dropped" retries, py4j's gateway, Spark's start-up banner and log4j lines) is shown with -v.
"""

from __future__ import annotations

import logging
import os
from importlib import resources

FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"

# libraries whose INFO/WARNING lines are routine noise for a person running a command
NOISY = ("kazoo", "py4j", "pyspark", "great_expectations", "urllib3", "matplotlib", "deltalake", "grpc")


def configure(verbosity: int = 0) -> None:
    """0: bkaudit WARNING, libraries ERROR; 1: bkaudit INFO, libraries WARNING; 2+: everything DEBUG."""
    explicit = os.environ.get("BKAUDIT_LOG_LEVEL")
    own = explicit or ("WARNING" if verbosity <= 0 else "INFO" if verbosity == 1 else "DEBUG")
    libraries = "ERROR" if verbosity <= 0 else "WARNING" if verbosity == 1 else "DEBUG"
    # levels only by default: services (`bookie run`, `autorecovery run`) install their own handler and format
    root = logging.getLogger()
    root.setLevel(own)
    for name in NOISY:
        logging.getLogger(name).setLevel(libraries)
    if verbosity > 0 and not root.handlers:
        # without a handler Python prints WARNING and above only (logging.lastResort): -v would show nothing
        handler = logging.StreamHandler()  # stderr: stdout is for --json
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    global VERBOSITY
    VERBOSITY = verbosity


VERBOSITY = 0
"""Set by `configure` (the CLI's -v count); 0 keeps the Spark driver JVM this process launches quiet."""


def spark_java_options() -> str | None:
    """Driver JVM options for a quiet local Spark session, or None with -v (Spark's own log4j defaults).

    Spark logs through log4j2 before any setLogLevel can run, so the configuration goes in at JVM launch.
    """
    if VERBOSITY > 0:
        return None
    config = resources.files("bkaudit.spark").joinpath("log4j2-quiet.properties")
    return f"-Dlog4j2.configurationFile=file:{config}"


# -- secrets never reach a log line (docs/security.md) ----------------------------------------------------
REDACTED = "<redacted>"
_SECRETS: set[str] = set()
_KAZOO_WIRE = ("Sending request(xid=%s): %s", "Received response(xid=%s): %r")


class KazooWireFilter(logging.Filter):
    """kazoo logs every request and response it sends at DEBUG, payload included: the digest Auth packet
    carries the ZooKeeper password, znode data carries ledger passwords (ledger metadata) and webhook
    secrets. Keep the operation and its path, drop the payload."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in _KAZOO_WIRE and isinstance(record.args, tuple) and len(record.args) == 2:
            xid, payload = record.args
            path = getattr(payload, "path", None)
            summary = f"{type(payload).__name__}({'path=' + repr(path) + ', ' if path else ''}{REDACTED})"
            record.msg, record.args = record.msg.replace("%r", "%s"), (xid, summary)
        return True


def install_kazoo_filter() -> None:
    """Once per process (idempotent): the filter on the logger kazoo's clients log through."""
    logger = logging.getLogger("kazoo.client")
    if not any(isinstance(f, KazooWireFilter) for f in logger.filters):
        logger.addFilter(KazooWireFilter())


def register_secret(secret: str) -> None:
    """From now on, any log record of this process whose message contains `secret` has it replaced by
    <redacted> (defence in depth for configured credentials, whatever library logs them)."""
    if len(secret) < 4 or secret in _SECRETS:
        return
    if not _SECRETS:
        _install_record_factory()
    _SECRETS.add(secret)


def _install_record_factory() -> None:
    make = logging.getLogRecordFactory()

    def redacting(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if record.msg in _KAZOO_WIRE:
            return record  # KazooWireFilter drops the whole payload; pre-formatting would hide it from it
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return record
        redacted = _py4j_without_bytes(message) if record.name.startswith("py4j") else message
        if any(s in redacted for s in _SECRETS):
            for s in _SECRETS:
                redacted = redacted.replace(s, REDACTED)
        if redacted is not message:
            record.msg, record.args = redacted, None
        return record

    logging.setLogRecordFactory(redacting)


def _py4j_without_bytes(message: str) -> str:
    """py4j's "Command to send" lines carry bytes arguments in base64 (a line starting with py4j's BYTES_TYPE
    'j'): Spark sends every pickled Python function that way, and a pickled closure holds whatever settings
    it captured (the snapshot's ZooKeeper credentials). A secret inside base64 is invisible to the plain-text
    replacement, so those lines keep only their size."""
    if "\nj" not in message:
        return message
    lines = message.split("\n")
    return "\n".join(f"j{REDACTED} ({len(ln) - 1} base64 chars)" if ln[:1] == "j" else ln for ln in lines)


__all__ = ["FORMAT", "NOISY", "REDACTED", "VERBOSITY", "KazooWireFilter", "configure", "install_kazoo_filter",
           "register_secret", "spark_java_options"]
