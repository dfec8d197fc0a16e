"""The console's roles: which named permissions each group holds.

Created by migration ``console.0001_roles`` (``0003_operator_cancels`` adds cancel_job);
``seed_demo`` and tests rely on these names.
"""

VIEW = [
    ("inbox", "job", "view_job"),
    ("inbox", "approval", "view_approval"),
    ("inbox", "worker", "view_worker"),
    ("inbox", "scopepause", "view_scopepause"),
    ("audit", "auditevent", "view_auditevent"),
    ("runs", "run", "view_run"),
    ("runs", "group", "view_group"),
    ("runs", "member", "view_member"),
]

ROLES: dict[str, list[tuple[str, str, str]]] = {
    "viewer": VIEW,
    "operator": [
        *VIEW,
        ("inbox", "job", "view_payload"),
        ("inbox", "job", "retry_job"),
        ("inbox", "job", "reconcile_job"),
        ("inbox", "job", "pause_scope"),
        ("inbox", "job", "cancel_job"),
        ("runs", "run", "close_run"),
    ],
    "approver": [
        *VIEW,
        ("inbox", "job", "view_payload"),
        ("inbox", "job", "approve_delete"),
    ],
}
