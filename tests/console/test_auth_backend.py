"""The console's model backend (console/auth.py): the same answers as Django's ModelBackend,
from one permission query and a raw user load, and nothing kept past the request."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from console.auth import ConsoleModelBackend
from tests.console.pagekit import make_user

pytestmark = pytest.mark.django_db


def fresh(user):
    """The user as a new request would load it (no per-object permission cache)."""
    return get_user_model().objects.get(pk=user.pk)


def perm(name: str) -> Permission:
    app_label, codename = name.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def both(user) -> tuple[set[str], set[str]]:
    return (
        ConsoleModelBackend().get_all_permissions(fresh(user)),
        ModelBackend().get_all_permissions(fresh(user)),
    )


def test_same_permissions_as_django_for_every_kind_of_user():
    direct = make_user("direct")
    direct.user_permissions.add(perm("inbox.view_job"))
    grouped = make_user("grouped", "operator")
    mixed = make_user("mixed", "viewer")
    mixed.user_permissions.add(perm("auth.add_group"))
    custom = Group.objects.create(name="custom")
    custom.permissions.add(perm("inbox.view_job"), perm("auth.view_permission"))
    mixed.groups.add(custom)
    nobody = make_user("nobody")
    inactive = make_user("inactive", "approver")
    inactive.is_active = False
    inactive.save()
    root = make_user("root", superuser=True)

    for user in (direct, grouped, mixed, nobody, inactive, root):
        ours, django = both(user)
        assert ours == django, user.username
    assert both(direct)[0] == {"inbox.view_job"}
    assert "auth.add_group" in both(mixed)[0] and "auth.view_permission" in both(mixed)[0]
    assert both(grouped)[0], "the operator role holds permissions"
    assert both(nobody)[0] == set() and both(inactive)[0] == set()
    # Object permissions are not this backend's: none, as Django's.
    assert ConsoleModelBackend().get_all_permissions(fresh(grouped), obj=object()) == set()


def test_one_query_per_request_for_all_permission_checks():
    user = fresh(make_user("op", "operator"))
    with CaptureQueriesContext(connection) as queries:
        assert user.has_perm("inbox.view_job")
        assert not user.has_perm("auth.delete_user")
        assert user.has_perm("inbox.view_job")
    assert len(queries) == 1, [q["sql"] for q in queries]


def test_a_revoked_group_counts_on_the_next_request():
    client = Client()
    user = make_user("op", "operator")
    client.force_login(user)
    assert client.get(reverse("console:home")).status_code == 200
    user.groups.clear()
    assert client.get(reverse("console:home")).status_code == 403
    user.groups.add(Group.objects.get(name="operator"))
    assert client.get(reverse("console:home")).status_code == 200


def test_get_user_loads_the_whole_user_with_database_types():
    user = make_user("op", "operator")
    user.last_login = timezone.now() - dt.timedelta(hours=1)
    user.first_name = "Ada"
    user.save()
    with CaptureQueriesContext(connection) as queries:
        loaded = ConsoleModelBackend().get_user(user.pk)
    assert len(queries) == 1
    assert loaded is not None and loaded.pk == user.pk and loaded.username == "op"
    # SQLite hands datetimes back as text; the converters must still apply.
    assert isinstance(loaded.last_login, dt.datetime) and loaded.last_login == user.last_login
    assert isinstance(loaded.date_joined, dt.datetime)
    assert loaded.first_name == "Ada" and loaded.is_active is True
    assert loaded.get_session_auth_hash() == user.get_session_auth_hash()


def test_get_user_refuses_missing_inactive_and_malformed_keys():
    user = make_user("gone", "operator")
    backend = ConsoleModelBackend()
    assert backend.get_user(user.pk + 1000) is None
    assert backend.get_user("not-a-number") is None
    user.is_active = False
    user.save()
    assert backend.get_user(user.pk) is None
    assert backend.get_user(str(make_user("here").pk)) is not None


def test_a_deactivated_user_is_logged_out_on_the_next_request():
    client = Client()
    user = make_user("op", "operator")
    client.force_login(user)
    assert client.get(reverse("console:home")).status_code == 200
    user.is_active = False
    user.save()
    response = client.get(reverse("console:home"))
    assert response.status_code == 302 and "login" in response["Location"]


def test_get_user_brings_the_permissions_in_the_same_query():
    """The request's user comes with its permissions (one statement): its checks make no query
    of their own, and they answer as Django's backend does for every kind of user."""
    from django.contrib.auth.backends import ModelBackend
    from django.contrib.auth.models import Permission

    direct = make_user("direct", None)
    direct.user_permissions.add(Permission.objects.get(codename="view_job"))
    grouped = make_user("grouped", "operator")
    nobody = make_user("nobody", None)
    root = make_user("root", None, superuser=True)
    for user in (direct, grouped, nobody, root):
        backend = ConsoleModelBackend()
        with CaptureQueriesContext(connection) as queries:
            loaded = backend.get_user(user.pk)
            checked = loaded.has_perm("inbox.view_job"), loaded.has_perm("auth.delete_user")
        expected = ModelBackend().get_all_permissions(fresh(user))
        assert backend.get_all_permissions(loaded) == expected, user.username
        assert checked == ("inbox.view_job" in expected or user.is_superuser, user.is_superuser)
        if not user.is_superuser:
            assert len(queries) == 1, [q["sql"] for q in queries]
        assert not hasattr(loaded, "console_permissions")
