"""Record when a run's lease was last granted, so expires_at = renewed_at + lease on every row."""

import django.utils.timezone
from django.db import migrations, models
from django.db.models import F


def copy_started_at(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Run.objects.update(renewed_at=F("started_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="renewed_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
            preserve_default=False,
        ),
        migrations.RunPython(copy_started_at, migrations.RunPython.noop),
    ]
