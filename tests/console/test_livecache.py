"""Dashboard readings shared between operators (console/livecache.py): a poll within the window
is answered from another operator's reading without reading the database, an operator's view
never moves backwards, the window bounds how stale a view can be, and lease bars rendered from
a shared reading count from the time of the render."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console import livecache
from console.htmx import dom_id
from runs.consolidators import PlannedGroup, PlannedMember
from runs.transitions import plan_run
from tests.console.pagekit import login
from tests.factories import make_job
from tests.support.startup import manage_check

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def sharing(settings):
    settings.CONSOLE_LIVE_CACHE = 0.5
    livecache.SHARED.clear()


class OneGroup:
    name = "one-group"

    def plan(self, *, store, carry_over):
        return [PlannedGroup("k", (PlannedMember("a.md"),))]


class Clock:
    """livecache's clock, moved by hand."""

    def __init__(self, monkeypatch, start: float = 1_800_000_000.0) -> None:
        self.now = start
        monkeypatch.setattr(livecache, "clock", lambda: self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds


def operator(name: str) -> Client:
    client = Client()
    login(client, name, "viewer")
    return client


def token_of(body: str, region: str) -> str:
    tag = re.search(rf'<section id="{region}"[^>]*>', body).group(0)
    return re.search(r'data-v="([^"]*)"', tag).group(1)


def poll(client: Client, region: str, token: str):
    headers = {"HX-Request": "true", "HX-Target": region}
    return client.get(reverse("console:home"), {"v": token}, headers=headers)


def data_queries(captured) -> list[str]:
    """What a poll read beyond the login: session, user and permissions."""
    own = ("django_session", "auth_user", "auth_permission")
    return [q["sql"] for q in captured if not any(t in q["sql"] for t in own)]


def test_a_poll_in_the_window_is_answered_from_another_operators_reading(monkeypatch):
    clock = Clock(monkeypatch)
    make_job("noop")
    first = poll(operator("a"), "dashboard-counts", "old.0")  # reads and shares
    assert first.status_code == 200
    token = token_of(first.content.decode(), "dashboard-counts")
    clock.advance(4)  # counts poll every 10 s: shared for 5
    other = operator("b")
    with CaptureQueriesContext(connection) as captured:
        same = poll(other, "dashboard-counts", token)
        behind = poll(other, "dashboard-counts", "old.0")
    assert same.status_code == 204
    assert behind.status_code == 200
    assert token_of(behind.content.decode(), "dashboard-counts") == token
    assert data_queries(captured.captured_queries) == []


def test_after_the_window_a_poll_reads_again_and_sees_the_change(monkeypatch):
    clock = Clock(monkeypatch)
    client = operator("a")
    token = token_of(client.get(reverse("console:home")).content.decode(), "dashboard-counts")
    make_job("noop")
    clock.advance(4.9)
    assert poll(client, "dashboard-counts", token).status_code == 204  # at most 5 s stale
    clock.advance(0.2)
    with CaptureQueriesContext(connection) as captured:
        fresh = poll(client, "dashboard-counts", token)
    assert fresh.status_code == 200
    assert data_queries(captured.captured_queries)
    assert token_of(fresh.content.decode(), "dashboard-counts").split(".")[0] != token.split(".")[0]


def test_a_view_newer_than_the_shared_reading_is_never_moved_back(monkeypatch):
    clock = Clock(monkeypatch)
    a, b = operator("a"), operator("b")
    old = poll(a, "dashboard-counts", "old.0")  # shared: no job yet
    old_token = token_of(old.content.decode(), "dashboard-counts")
    clock.advance(1)
    make_job("noop")
    # B loads the page: a full page always reads afresh, so B shows the job.
    newer = token_of(b.get(reverse("console:home")).content.decode(), "dashboard-counts")
    assert newer.split(".")[0] != old_token.split(".")[0]
    # The full page's reading replaced the shared one; put the older one back, as another
    # web process would still hold it.
    livecache.SHARED.clear()
    livecache.SHARED.keep(
        "dashboard:dashboard-counts",
        livecache.Reading({}, old_token.split(".")[0], int(old_token.split(".")[1]) / 1000),
    )
    clock.advance(1)
    assert poll(b, "dashboard-counts", newer).status_code == 204  # keeps its newer view
    # An operator whose view is older than the shared reading gets the shared one.
    behind = poll(a, "dashboard-counts", f"{old_token.split('.')[0]}x.0")
    assert behind.status_code == 200
    assert token_of(behind.content.decode(), "dashboard-counts") == old_token


def test_a_lease_bar_from_a_shared_reading_counts_from_the_render(monkeypatch):
    clock = Clock(monkeypatch)
    plan_run(store="s1", owner="w-1", lease_seconds=600, consolidator=OneGroup())
    first = poll(operator("a"), "dashboard-runs", "old.0")
    remaining = int(re.search(r'data-lease-remaining="(-?\d+)"', first.content.decode()).group(1))
    clock.advance(4)
    again = poll(operator("b"), "dashboard-runs", "old.0")
    assert token_of(again.content.decode(), "dashboard-runs") == token_of(
        first.content.decode(), "dashboard-runs"
    )
    later = int(re.search(r'data-lease-remaining="(-?\d+)"', again.content.decode()).group(1))
    assert remaining - 5 <= later <= remaining - 3


def test_sharing_off_reads_every_poll(monkeypatch, settings):
    settings.CONSOLE_LIVE_CACHE = 0
    Clock(monkeypatch)
    client = operator("a")
    poll(client, "dashboard-counts", "old.0")
    with CaptureQueriesContext(connection) as captured:
        poll(client, "dashboard-counts", "old.0")
    assert data_queries(captured.captured_queries)


@pytest.mark.parametrize("token", ["x." + "9" * 400, "a.b.c", "<script>", ".", "x.-5"])
def test_a_hostile_token_is_an_ordinary_poll(token):
    client = operator("a")
    response = poll(client, "dashboard-counts", token)
    assert response.status_code == 200
    assert token_of(response.content.decode(), "dashboard-counts") != token


def test_made_up_keys_cannot_grow_the_process():
    for i in range(livecache.MAX_READINGS * 3):
        livecache.SHARED.keep(f"k{i}", livecache.Reading({}, "v", float(i)))
    assert len(livecache.SHARED._readings) <= livecache.MAX_READINGS


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("abc.1500", ("abc", 1.5)),
        ("abc", ("abc", None)),
        ("abc.x", ("abc", None)),
        ("", ("", None)),
        ("a.b.c", ("a", None)),
        ("x." + "9" * 400, ("x", None)),
    ],
)
def test_tokens_parse_or_match_nothing(value, parsed):
    assert livecache.parse_token(value) == parsed


@pytest.mark.parametrize("value", ["abc", "2", "-0.1"])
def test_a_bad_share_refuses_to_start(tmp_path, value):
    proc = manage_check(tmp_path, CONSOLE_LIVE_CACHE=value)
    assert proc.returncode != 0
    assert "CONSOLE_LIVE_CACHE must be a share of the poll interval" in proc.stderr


def test_a_store_live_block_poll_is_answered_from_the_runs_page_reading(monkeypatch):
    clock = Clock(monkeypatch)
    plan_run(store="s1", owner="w-1", lease_seconds=600, consolidator=OneGroup())
    page = operator("a").get(reverse("console:runs")).content.decode()
    tag = re.search(r'<div id="(live-[0-9a-f]+)"[^>]*>', page)
    live_id, token = tag.group(1), re.search(r'data-v="([^"]*)"', tag.group(0)).group(1)
    remaining = int(re.search(r'data-lease-remaining="(-?\d+)"', page).group(1))
    clock.advance(2)  # the block polls every 5 s: shared for 2.5
    other = operator("b")
    headers = {"HX-Request": "true", "HX-Target": live_id}
    url = reverse("console:runs")
    with CaptureQueriesContext(connection) as captured:
        same = other.get(url, {"store": "s1", "v": token}, headers=headers)
        behind = other.get(url, {"store": "s1", "v": "old.0"}, headers=headers)
    assert data_queries(captured.captured_queries) == []
    assert same.status_code == 204 and behind.status_code == 200
    body = behind.content.decode()
    assert f'data-v="{token}"' in body
    later = int(re.search(r'data-lease-remaining="(-?\d+)"', body).group(1))
    assert remaining - 3 <= later <= remaining - 1
    clock.advance(1)  # past the window: read again
    with CaptureQueriesContext(connection) as captured:
        other.get(url, {"store": "s1", "v": "old.0"}, headers=headers)
    assert data_queries(captured.captured_queries)
    # A store nobody runs is not kept: 404, and no reading for it.
    nope = {"HX-Request": "true", "HX-Target": dom_id("live", "nope")}
    missing = other.get(url, {"store": "nope", "v": "old.0"}, headers=nope)
    assert missing.status_code == 404
    assert livecache.SHARED.fresh("runs:nope", 10) is None
