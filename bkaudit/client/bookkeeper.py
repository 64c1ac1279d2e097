"""`BookKeeper`: the ledger client's entry object (create, open with or without recovery, delete, list).

It owns a ZooKeeper session and a pool of bookie connections and hands them to the handles it creates.
Protocol logic lives in the handle, pipeline, fencing and recovery modules; this class only wires them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any

from bkaudit.client.context import ClientContext, digest_for, master_key_for
from bkaudit.client.directory import BookieDirectory, ZkBookieDirectory
from bkaudit.client.handle import WriteHandle
from bkaudit.client.pipeline import AddPipeline
from bkaudit.client.reader import ReadHandle, read_last_add_confirmed
from bkaudit.client.recovery import recover as recover_ledger
from bkaudit.client.settings import ClientSettings
from bkaudit.errors import MetadataError
from bkaudit.model.ledger import DigestType, FrozenMap, LedgerMetadata, LedgerState, Segment
from bkaudit.model.quorum import validate_quorum
from bkaudit.store.ledgers import MetadataStore

if TYPE_CHECKING:
    from bkaudit.zk.settings import ZkSettings

log = logging.getLogger(__name__)


class BookKeeper:
    """A BookKeeper client bound to one cluster (its ledger metadata store and bookies)."""

    def __init__(
        self,
        *,
        store: MetadataStore,
        pool: Any,
        directory: BookieDirectory,
        settings: ClientSettings | None = None,
        owns: tuple[Any, ...] = (),
    ) -> None:
        self.settings = settings or ClientSettings()
        self.pool = pool
        self._owns = owns
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bk-client")
        self._ctx = ClientContext(
            store=store, pool=pool, directory=directory, executor=self._executor, settings=self.settings
        )

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        zk: ZkSettings | None = None,
        *,
        settings: Any = None,
        placement: Any = None,
        static: Any = None,
        tls: Any = None,
    ) -> BookKeeper:
        """Connect to the cluster `zk` names (the resolved [zk] settings: ZooKeeper and ledgers root; default:
        settings' [zk], else 127.0.0.1:2181 and /ledgers) and find the bookies registered there.

        `settings` is a `bkaudit.config.Settings` (its [zk], [client] and [placement] sections are used) or a
        bare `ClientSettings`; `placement` overrides the placement policy (default: rack-aware, at least two
        racks per write quorum); `static` / `tls` are passed to the bookie connection pool (`tls` defaults
        to the settings' [rpc] TLS).
        """
        from bkaudit.rpc.pool import BookieClientPool
        from bkaudit.store import connect as connect_store

        zk_settings = zk if zk is not None else _zk_settings(settings)
        client_settings, policy = _client_and_policy(settings)
        transport = "native"
        if _is_config(settings):
            from bkaudit.rpc.settings import RpcSettings
            from bkaudit.rpc.tls import TlsConfig

            transport = settings.get(RpcSettings).transport
            if tls is None:  # [rpc] tls_* as every other bkaudit bookie client (TLS-only bookies answer EUA)
                tls = TlsConfig.from_settings(settings)
        cluster = connect_store(zk_settings)
        session = cluster.client
        try:
            # RPC deadline no longer than the client's own timeouts, so a hung bookie is replaced in time
            pool = BookieClientPool(
                registry=cluster.registry,
                static=static,
                tls=tls,
                request_timeout_s=min(client_settings.add_timeout_s, client_settings.read_timeout_s),
                transport=transport,
            )
        except Exception:
            _stop_zk(session)
            raise
        directory = ZkBookieDirectory(
            cluster,
            policy=placement or policy,
            settings=settings if _is_config(settings) else None,
        )
        return cls(
            store=cluster.ledgers,
            pool=pool,
            directory=directory,
            settings=client_settings,
            owns=(pool, session),
        )

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> BookKeeper:
        """Connect using a `bkaudit.config.Settings` ([zk] for the session, [client] and [placement])."""
        return cls.connect(settings=settings, **kwargs)

    # -- ledgers -------------------------------------------------------------------------------------
    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest_type: DigestType = DigestType.CRC32C,
        password: bytes | str = b"",
        custom_metadata: Mapping[str, bytes | str] | None = None,
    ) -> WriteHandle:
        """Create an OPEN ledger on an ensemble chosen by the placement policy; returns its writer."""
        validate_quorum(ensemble_size, write_quorum, ack_quorum)
        pwd = password.encode() if isinstance(password, str) else bytes(password)
        ensemble = self._ctx.directory.choose_ensemble(ensemble_size, write_quorum, ack_quorum)
        custom = FrozenMap(
            tuple(
                (k, v.encode() if isinstance(v, str) else bytes(v))
                for k, v in (custom_metadata or {}).items()
            )
        )
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            state=LedgerState.OPEN,
            last_entry_id=-1,
            length=0,
            digest_type=digest_type,
            password=pwd,
            segments=(Segment(0, tuple(ensemble)),),
            custom_metadata=custom,
        )
        ledger_id = self._ctx.store.new_ledger_id()
        version = self._ctx.store.create(ledger_id, metadata)
        log.info(
            "created ledger %s on %s (E%d WQ%d AQ%d)",
            ledger_id,
            ", ".join(ensemble),
            ensemble_size,
            write_quorum,
            ack_quorum,
        )
        return self._write_handle(ledger_id, metadata, version)

    def _write_handle(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> WriteHandle:
        s = self.settings
        pipeline = AddPipeline(
            ledger_id=ledger_id,
            metadata=metadata,
            version=version,
            master_key=master_key_for(metadata.password),
            pool=self.pool,
            directory=self._ctx.directory,
            executor=self._executor,
            store=self._ctx.store,
            add_timeout_s=s.add_timeout_s,
            max_outstanding=s.max_outstanding_adds,
            max_ensemble_changes=s.max_ensemble_changes,
        )
        digest = digest_for(ledger_id, metadata.password, metadata.digest_type)
        return WriteHandle(
            ledger_id,
            pipeline,
            digest,
            self._ctx.store,
            close_timeout_s=s.close_timeout_s,
            add_timeout_s=s.add_timeout_s,
        )

    def open_ledger(
        self,
        ledger_id: int,
        recover: bool = True,
        password: bytes | str | None = None,
        *,
        lost_copies: frozenset[str] = frozenset(),
    ) -> ReadHandle:
        """Open for reading. recover=True fences the writer and closes the ledger first (the only way to be
        sure of its end); recover=False leaves a live writer alone and reads up to the current LAC.
        `lost_copies`: bookies known to have lost entries (wiped), whose "no such entry" recovery ignores."""
        metadata, _ = self._ctx.store.read(ledger_id)
        _check_password(ledger_id, metadata, password)  # before fencing: a wrong password must not fence
        if recover:
            metadata, _ = recover_ledger(self._ctx, ledger_id, lost_copies=lost_copies)
        digest = digest_for(ledger_id, metadata.password, metadata.digest_type)
        if metadata.is_closed:
            lac = metadata.last_entry_id
        else:
            lac = read_last_add_confirmed(
                self.pool, digest, ledger_id, metadata, self.settings.read_timeout_s
            )
        return ReadHandle(
            ledger_id, metadata, lac, self.pool, digest, read_timeout_s=self.settings.read_timeout_s
        )

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's current metadata (NoSuchLedger if it does not exist)."""
        return self._ctx.store.read(ledger_id)[0]

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger's metadata. Bookies keep the entries until their own garbage collection
        notices the ledger is gone (bkaudit's bookie has no GC: the data stays on disk)."""
        self._ctx.store.delete(ledger_id)

    def list_ledgers(self) -> list[int]:
        """Ids of every ledger under the root, ascending."""
        return self._ctx.store.list_ids()

    # -- lifecycle -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release bookie connections and the ZooKeeper session this client opened."""
        self._executor.shutdown(wait=False, cancel_futures=False)
        for resource in self._owns:
            if hasattr(resource, "stop"):
                _stop_zk(resource)
            elif hasattr(resource, "close"):
                try:
                    resource.close()
                except Exception as exc:
                    log.debug("closing %r failed: %s", resource, exc)

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


LedgerClient = BookKeeper


def _check_password(ledger_id: int, metadata: LedgerMetadata, password: bytes | str | None) -> None:
    if password is None:
        return
    pwd = password.encode() if isinstance(password, str) else bytes(password)
    if pwd != metadata.password:
        raise MetadataError(
            "password does not match the ledger's (BookKeeper: UnauthorizedAccess)", ledger_id=ledger_id
        )


def _is_config(settings: Any) -> bool:
    return settings is not None and not isinstance(settings, ClientSettings) and hasattr(settings, "get")


def _zk_settings(settings: Any) -> ZkSettings:
    """The settings' [zk], or the defaults when `settings` is none or a bare ClientSettings."""
    from bkaudit.config import ZkSettings

    found: ZkSettings = settings.get(ZkSettings) if _is_config(settings) else ZkSettings()
    return found


def _client_and_policy(settings: Any) -> tuple[ClientSettings, Any]:
    """(client settings, placement policy or None for the default) from any settings form."""
    if isinstance(settings, ClientSettings):
        return settings, None
    if not _is_config(settings):
        return ClientSettings(), None
    from bkaudit.audit.settings import policy_from_settings

    return settings.get(ClientSettings), policy_from_settings(settings)


def _stop_zk(session: Any) -> None:
    try:
        session.stop()
        session.close()
    except Exception as exc:
        log.debug("stopping ZooKeeper session failed: %s", exc)
