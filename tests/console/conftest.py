"""Console test helpers: role users, and the Playwright harness for the browser tests.

The browser tests drive Debian's chromium (``/usr/bin/chromium``) through pytest-playwright
against pytest-django's ``live_server``. Without chromium they skip — and CI's
``CONSOLE_REQUIRE_ALL=1`` turns that skip into a failure, which is the point.

One browser per session; each test logs its users in by planting a session cookie made with
Django's test client (``force_login``), one context per role, so only ``test_login_*`` pays for
the login form. Data is created through transitions/services in the test process and committed
(``transactional_db``), so the server thread sees it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 390, "height": 844}
PASSWORD = "console-test-password"

# username -> role group (None: superuser)
ROLE_USERS: dict[str, str | None] = {
    "admin": None,
    "operator": "operator",
    "approver": "approver",
    "approver2": "approver",
    "viewer": "viewer",
}


@pytest.fixture
def fast_passwords(settings) -> None:
    """Hash test passwords cheaply; the login test still goes through the real form."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def ensure_roles() -> None:
    """The role groups as the roles migration makes them.

    A transactional test's flush empties every table, the migration's groups included (Django
    re-creates only content types and permissions); the next one needs them back.
    """
    from django.contrib.auth.models import Group, Permission

    from console.roles import ROLES

    for role, perms in ROLES.items():
        group, created = Group.objects.get_or_create(name=role)
        if created:
            for app_label, _model, codename in perms:
                group.permissions.add(
                    Permission.objects.get(content_type__app_label=app_label, codename=codename)
                )


@pytest.fixture
def role_users(db, fast_passwords) -> dict[str, object]:
    """One user per console role (groups from the roles migration, restored after a flush)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    ensure_roles()
    User = get_user_model()
    users = {}
    for name, role in ROLE_USERS.items():
        if role is None:
            user = User.objects.create_superuser(name, f"{name}@example.test", PASSWORD)
        else:
            user = User.objects.create_user(name, f"{name}@example.test", PASSWORD)
            user.groups.add(Group.objects.get(name=role))
        users[name] = user
    return users


# --- Playwright ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser_type_launch_args() -> dict:
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium not installed")
    return {"executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args() -> dict:
    return {"viewport": WIDE, "locale": "en-US", "timezone_id": "UTC"}


@pytest.fixture
def browser_pages(
    browser, live_server, role_users, browser_context_args
) -> Iterator[Callable[..., object]]:
    """``as_user("operator")`` → a Page logged in as that user (one context per user/test)."""
    from django.test import Client

    contexts: dict[tuple[str, str], object] = {}

    def as_user(username: str, *, viewport: dict | None = None):
        size = viewport or WIDE
        key = (username, f"{size['width']}x{size['height']}")
        if key not in contexts:
            from django.contrib.auth import get_user_model

            client = Client()
            # Fresh from the database: a seed may have re-set the password since the fixture.
            client.force_login(get_user_model().objects.get(username=username))
            cookie = client.cookies["sessionid"]
            context = browser.new_context(**{**browser_context_args, "viewport": size})
            context.set_default_timeout(10_000)
            context.add_cookies(
                [{"name": "sessionid", "value": cookie.value, "url": live_server.url}]
            )
            contexts[key] = context
        return contexts[key].new_page()

    yield as_user
    for context in contexts.values():
        context.close()


@pytest.fixture
def anon_page(browser, browser_context_args) -> Iterator[object]:
    context = browser.new_context(**browser_context_args)
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page PNG under artifacts/screenshots/ (git-ignored) and return its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
