"""Login throttling with django-axes (the failure it stops: fifty wrong passwords in 19
seconds, then the right one works).

Repeated failures for one user name, or from one address, lock it out for the cool-off; the
right password does not get in meanwhile. The lockout is the console's login page with the
reason (HTTP 429, Retry-After). An admin sees it in the admin and clears it there or with
``manage.py axes_reset``; the cool-off ends it by itself.
"""

from __future__ import annotations

import datetime as dt
import io

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "the-right-password-42"
LIMIT = 5


@pytest.fixture(autouse=True)
def throttling(settings, fast_passwords) -> None:
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = dt.timedelta(minutes=15)


@pytest.fixture
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator():
    return get_user_model().objects.create_user("operator", "op@example.test", PASSWORD)


def _login(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        reverse("console:login"),
        {"username": username, "password": password},
        REMOTE_ADDR=address,
    )


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_login_after_repeated_failures_for_a_user_is_locked_out(operator) -> None:
    client = Client()
    for attempt in range(LIMIT):
        response = _login(client, "operator", f"wrong-{attempt}", address=f"10.0.1.{attempt}")
    response = _login(client, "operator", PASSWORD, address="10.0.2.1")
    assert response.status_code == 429
    assert not _logged_in(client)
    body = response.content.decode()
    assert "Too many failed logins" in body
    assert "15 minutes" in body
    assert 'name="password"' in body  # the console's login page, not a bare message
    assert response["Retry-After"] == "900"


def test_login_after_repeated_failures_from_an_address_is_locked_out(operator) -> None:
    client = Client()
    for attempt in range(LIMIT):
        _login(client, f"guess-{attempt}", "wrong", address="10.0.3.3")
    response = _login(client, "operator", PASSWORD, address="10.0.3.3")
    assert response.status_code == 429
    assert not _logged_in(client)
    # The same user from another address is not locked (only this address is).
    other = Client()
    assert _login(other, "operator", PASSWORD, address="10.0.4.4").status_code == 302
    assert _logged_in(other)


def test_login_below_the_limit_works_and_resets_the_count(operator) -> None:
    client = Client()
    for attempt in range(LIMIT - 1):
        assert _login(client, "operator", f"wrong-{attempt}").status_code == 200
    assert _login(client, "operator", PASSWORD).status_code == 302
    assert _logged_in(client)
    assert not AccessAttempt.objects.filter(username="operator").exists()


def test_lockout_ends_after_the_cool_off(operator) -> None:
    client = Client()
    for attempt in range(LIMIT):
        _login(client, "operator", f"wrong-{attempt}")
    assert _login(client, "operator", PASSWORD).status_code == 429
    # The cool-off passes (the attempts are as old as it is long).
    past = dt.timedelta(minutes=15, seconds=1)
    for attempt in AccessAttempt.objects.all():
        AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=attempt.attempt_time - past)
    assert _login(client, "operator", PASSWORD).status_code == 302


def test_admin_sees_the_lockout_and_clears_it(operator) -> None:
    client = Client()
    for attempt in range(LIMIT):
        _login(client, "operator", f"wrong-{attempt}")
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", "r@example.test", "x"))
    listing = admin.get(reverse("admin:axes_accessattempt_changelist"))
    assert listing.status_code == 200
    assert "operator" in listing.content.decode()
    attempt = AccessAttempt.objects.get(username="operator")
    response = admin.post(
        reverse("admin:axes_accessattempt_changelist"),
        {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert _login(client, "operator", PASSWORD).status_code == 302


def test_axes_reset_command_clears_every_lockout(operator) -> None:
    client = Client()
    for attempt in range(LIMIT):
        _login(client, "operator", f"wrong-{attempt}")
    assert _login(client, "operator", PASSWORD).status_code == 429
    out = io.StringIO()
    call_command("axes_reset", stdout=out)
    assert "attempts removed" in out.getvalue()
    assert _login(client, "operator", PASSWORD).status_code == 302


def test_address_behind_trusted_proxy_is_the_clients(settings, operator) -> None:
    """Behind one TLS proxy every request comes from the proxy; the client's address is the one
    the proxy appended to X-Forwarded-For (an address the client wrote itself is not trusted)."""
    settings.CONSOLE_TRUSTED_PROXIES = 1
    client = Client()
    for attempt in range(LIMIT):
        client.post(
            reverse("console:login"),
            {"username": f"guess-{attempt}", "password": "wrong"},
            REMOTE_ADDR="10.9.9.9",
            HTTP_X_FORWARDED_FOR=f"1.2.3.{attempt}, 203.0.113.7",
        )
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.7"}
    # Another client behind the same proxy is not locked out.
    other = client.post(
        reverse("console:login"),
        {"username": "operator", "password": PASSWORD},
        REMOTE_ADDR="10.9.9.9",
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert other.status_code == 302


def test_authenticate_without_a_request_is_not_throttled(operator) -> None:
    """A script or the shell (no request, no address) authenticates as before."""
    from django.contrib.auth import authenticate

    assert authenticate(username="operator", password=PASSWORD) == operator
    assert authenticate(username="operator", password="wrong") is None
