"""Make the audit table append-only in the database itself (SQLite and PostgreSQL)."""

from django.db import migrations


def install(apps, schema_editor):
    from audit import triggers

    triggers.install(schema_editor)


def drop(apps, schema_editor):
    from audit import triggers

    triggers.drop(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunPython(install, drop)]
