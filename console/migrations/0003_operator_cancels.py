"""The operator role may cancel jobs that have not begun (``inbox.cancel_job``)."""

from django.db import migrations


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    ct, _ = ContentType.objects.get_or_create(app_label="inbox", model="job")
    # Permissions are made after migrate (post_migrate); make this one now, as 0001 does.
    perm, _ = Permission.objects.get_or_create(
        content_type=ct,
        codename="cancel_job",
        defaults={"name": "Can cancel jobs that have not begun"},
    )
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(perm)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    group = Group.objects.filter(name="operator").first()
    if group is not None:
        group.permissions.remove(
            *group.permissions.filter(content_type__app_label="inbox", codename="cancel_job")
        )


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_action_request"),
        ("inbox", "0005_cancel_permission"),
    ]
    operations = [migrations.RunPython(grant, revoke)]
