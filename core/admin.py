"""The admin base every view-only model shares; core registers no model of its own."""

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """View, search and filter; never add, change or delete, for superusers too: the rows are
    written only by their services (an audit row, a heartbeat, a run), so a raw edit here
    would bypass the guard and the trail that come with them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
