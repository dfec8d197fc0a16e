"""Browser tests (Playwright + Debian chromium against live_server)."""

from __future__ import annotations

import pytest

from tests.console.conftest import PASSWORD, screenshot

pytestmark = [pytest.mark.browser]


def test_login_with_password_shows_dashboard(anon_page, live_server, role_users):
    page = anon_page
    page.goto(live_server.url + "/")
    assert "/login/" in page.url
    screenshot(page, "login-1280")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    assert page.locator(".who").inner_text() == "operator"
