"""Small helpers for the console page and action tests (users, HTMX requests, form data)."""

from __future__ import annotations

import importlib
import uuid
from typing import Any

from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


create_roles = importlib.import_module("console.migrations.0001_roles").create_roles


def make_user(username: str, role: str | None = None, *, superuser: bool = False) -> Any:
    """A user in one of the console roles (no password: tests log in with force_login)."""
    User = get_user_model()
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.test", None)
    user = User.objects.create_user(username, f"{username}@example.test", None)
    if role:
        if not Group.objects.filter(name=role).exists():
            # A transactional test earlier in the run flushed the migration-made roles.
            create_roles(django_apps, None)
        user.groups.add(Group.objects.get(name=role))
    return user


def login(client: Client, username: str, role: str | None = None, **kw: Any) -> Any:
    user = make_user(username, role, **kw)
    client.force_login(user)
    return user


def hx(target: str | None = None, current: str = "http://testserver/") -> dict[str, str]:
    """Headers htmx sends; ``target`` is the id of the element being swapped."""
    headers = {"HX-Request": "true", "HX-Current-URL": current}
    if target:
        headers["HX-Target"] = target
    return headers


def action_form(reason: str = "because", **extra: Any) -> dict[str, Any]:
    return {"request_id": uuid.uuid4().hex, "reason": reason, **extra}
