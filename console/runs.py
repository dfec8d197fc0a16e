"""The runs page: one card per store with its current run, lease, group progress and recent
takeovers; a stuck run (owner dead, or no progress for a while:
``runs.selectors.stuck_reasons``) says so in red with the reason, next to "close stuck run"
(through ``runs.transitions.close_run``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from console import dashboard, livecache
from console.htmx import dom_id, region_template, version_of
from console.policy import ActionContext, action, page
from core.clock import db_now
from runs import transitions
from runs.models import Run, RunStatus
from runs.selectors import RunView, StoreOverview, Stuck, store_overview, stuck_reasons

RUNS = "console/runs.html"
# How often a store's live block polls (its ``hx-trigger``), in seconds.
LIVE_EVERY = 5


# --- read model -------------------------------------------------------------------------------


@dataclass
class StoreCard:
    """One store on the runs page: its overview plus what the page needs to render it."""

    overview: StoreOverview
    dom_id: str
    takeovers: list[RunView]
    now: dt.datetime
    # Why the current run is stuck (owner dead or no progress), None when it is not (or not active).
    stuck: Stuck | None = None
    # livecache.clock() just before the read: the live block's token carries it.
    stamp: float = 0.0

    @property
    def store(self) -> str:
        return self.overview.store

    @property
    def current(self) -> RunView | None:
        return self.overview.current

    @property
    def live_id(self) -> str:
        return dom_id("live", self.overview.store)

    @property
    def finished_groups(self) -> int:
        counts = self.overview.group_counts
        return counts.get("done", 0) + counts.get("deferred", 0)

    @property
    def version(self) -> str:
        """What the card's live block shows, without the clock (the lease bar and the ages
        tick in the browser): its poll's 204."""
        current = self.overview.current
        run = current.run if current else None
        return version_of(
            self.overview.error,
            (run.run_id, run.status, run.worker_id, run.pid, run.started_at) if run else None,
            (run.renewed_at, run.expires_at, current.effective_status) if current else None,
            self.stuck,
            self.overview.group_counts,
        )

    @property
    def live_every(self) -> int:
        return LIVE_EVERY

    @property
    def token(self) -> str:
        """The live block's ``data-v``: its version and read time (console.livecache)."""
        return livecache.token(self.version, self.stamp)

    @property
    def closable(self) -> bool:
        """Only a row stored ``active`` can be closed (lapsed or not)."""
        current = self.overview.current
        return current is not None and current.run.status == "active"


def store_cards(*, store: str | None = None) -> list[StoreCard]:
    stamp = livecache.clock()
    now = db_now()
    cards = []
    overviews = store_overview(now, store=store)
    stuck = stuck_reasons([o.current.run for o in overviews if o.current], now)
    for overview in overviews:
        takeovers = [
            view
            for view in overview.history
            if view.run.status in ("taken_over", "abandoned", "expired")
        ]
        cards.append(
            StoreCard(
                overview=overview,
                dom_id=dom_id("store", overview.store),
                takeovers=takeovers,
                now=now,
                stuck=stuck.get(overview.current.run.run_id) if overview.current else None,
                stamp=stamp,
            )
        )
    return cards


# --- views ------------------------------------------------------------------------------------


def _live_reader(store: str):
    def read() -> tuple[dict, str]:
        cards = store_cards(store=store)
        if not cards:
            raise Http404(f"no runs for store {store!r}")
        return {"card": cards[0], "now": cards[0].now}, cards[0].version

    return read


@page(permission="runs.view_run")
def runs(request: HttpRequest) -> HttpResponse:
    # ``?store=`` (the audit log links runs this way) narrows the page to that store; a card's
    # live block polls the same way, targeting its own id, and its poll is answered from a
    # reading shared between operators when one is recent enough (console.livecache).
    store = request.GET.get("store") or None
    live = {dom_id("live", store): "store-live"} if store else None
    template = region_template(request, RUNS, ("runs-stores",), default="runs-stores", targets=live)
    if store and template == f"{RUNS}#store-live":
        reading = livecache.poll(request, f"runs:{store}", LIVE_EVERY, _live_reader(store))
        if reading is None:
            return HttpResponse(status=204)
        context = reading.for_render()
        # The shared card renders with the render's clock (lease bar, ages), the read's stamp.
        card = replace(context["card"], now=context["now"], stamp=reading.stamp)
        return render(request, template, {"card": card})
    cards = store_cards(store=store)
    for card in cards:
        livecache.SHARED.keep(
            f"runs:{card.store}",
            livecache.Reading({"card": card, "now": card.now}, card.version, card.stamp),
        )
    return render(request, template, {"cards": cards, "store": store})


def _store_of(run_id: str) -> str:
    store = Run.objects.filter(run_id=run_id).values_list("store", flat=True).first()
    if store is None:
        raise Http404(f"run {run_id!r} does not exist")
    return store


def _card_response(request: HttpRequest, store: str, act: ActionContext) -> HttpResponse:
    cards = store_cards(store=store)
    return render(request, f"{RUNS}#store-card", {"card": cards[0], "act": act})


@action(permission="runs.close_run", region="store-card", needs_reason=True)
def close_run(request: HttpRequest, run_id: str, *, act: ActionContext):
    store = _store_of(run_id)
    # A refusal (RunError) is a DomainError: shown in the card like any refused action (409).
    act.perform(
        lambda: transitions.close_run(
            run_id, status=RunStatus.ABANDONED, actor=act.actor, reason=act.reason
        ),
        done=f"Run {run_id} closed as abandoned; the store is free.",
    )
    if request.htmx and request.htmx.target == "dashboard-runs":
        # Closed from the dashboard: its runs region answers, with the same message.
        return dashboard.runs_region(request, act)
    return _card_response(request, store, act)
