from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from django.db.models.signals import pre_migrate

        from audit.history import refuse_backwards_plan

        # Before any migration runs: a plan that unapplies audit migrations is refused.
        pre_migrate.connect(refuse_backwards_plan, sender=self, dispatch_uid="audit-history")
