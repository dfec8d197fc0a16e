"""The stock changelist: a default ``ModelAdmin``, nothing tuned (the baseline to beat)."""

from django.contrib import admin

from bench.stockadmin.models import StockJob

admin.site.register(StockJob)
