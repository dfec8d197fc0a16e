"""Create the viewer / operator / approver groups with their permissions."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from console.roles import ROLES

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    for role, perms in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        for app_label, model, codename in perms:
            ct, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
            perm, _ = Permission.objects.get_or_create(
                content_type=ct, codename=codename, defaults={"name": codename.replace("_", " ")}
            )
            group.permissions.add(perm)


def drop_roles(apps, schema_editor):
    from console.roles import ROLES

    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("inbox", "0001_initial"),
        ("audit", "0001_initial"),
        ("runs", "0001_initial"),
    ]
    operations = [migrations.RunPython(create_roles, drop_roles)]
