"""SQLite: refuse INSERT OR REPLACE over an existing event. All databases: unapplying the
audit migrations is refused unless AUDIT_ALLOW_ERASING_HISTORY is set (audit/history.py)."""

from django.db import migrations


def install(apps, schema_editor):
    from audit import triggers

    triggers.install_replace_guard(schema_editor)


def reverse(apps, schema_editor):
    from audit import history, triggers

    history.refuse_unless_allowed(apps, schema_editor)
    triggers.drop_replace_guard(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only_triggers")]
    operations = [migrations.RunPython(install, reverse)]
