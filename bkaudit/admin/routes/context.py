"""What every route needs, in one frozen object on `app.state.context`, handed to routes by one dependency
(`Ctx`): no route closes over the app's arguments and no module holds a global cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

from fastapi import Depends, Request

from bkaudit.admin.auth import Caller, TokenBook
from bkaudit.admin.guard import ApiError
from bkaudit.admin.settings import AdminSettings
from bkaudit.errors import FormatError, MetadataConflict
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc

if TYPE_CHECKING:
    from bkaudit.admin.settings import Network
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse


@dataclass(frozen=True, kw_only=True)
class Context:
    """One app's cluster store, settings and helpers; `bookie_http_timeout_s` bounds the read-only switch's
    call to a BookKeeper bookie's own HTTP admin API, `allow` is `[admin] webhook_allow_networks` parsed."""

    cluster: ClusterStore
    settings: AdminSettings
    tokens: TokenBook
    allow: tuple[Network, ...]
    warehouse: Warehouse | str = ""
    pool: Any = None
    bookie_http_timeout_s: float = 10.0

    def known(self, bookie: str) -> str:
        """The bookie, if it is registered or has a cookie; else 404."""
        registered = self.cluster.registry.bookie_state(bookie) != "absent"
        if not registered and not self.cluster.registry.has_cookie(bookie):
            raise ApiError(404, f"unknown bookie {bookie}")
        return bookie

    def change(
        self, bookie: str, target: str, who: Caller, reason: str, force: bool = False
    ) -> dict[str, Any]:
        """An operator's transition through the lifecycle service, its refusals as API errors."""
        try:
            state = lc.LifecycleState.parse(target)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        try:
            record = service.transition(self.cluster, bookie, state, actor=lc.Actor.OPERATOR,
                                        by=f"api:{who.name}", reason=reason, force=force)
        except service.UnknownBookie as exc:
            raise ApiError(404, str(exc)) from None
        except lc.TransitionRefused as exc:
            raise ApiError(409, str(exc), blockers=list(exc.blockers)) from None
        except MetadataConflict as exc:
            raise ApiError(409, str(exc)) from None
        except FormatError as exc:
            raise ApiError(409, f"the state znode is unreadable: {exc}") from None
        return {"bookie": bookie, **record.to_dict()}


def context(request: Request) -> Context:
    return cast(Context, request.app.state.context)


Ctx = Annotated[Context, Depends(context)]
