"""The URL converter for producer-chosen ids (jobs, runs): it takes every character, so any id
the inbox accepts (slashes, percent signs, spaces, any Unicode) round-trips through
``reverse()`` and back, and an id it refuses (a newline) still reaches the view, which answers
its own 404 (a JSON problem under the API) instead of an unmatched route."""

from __future__ import annotations

from django.urls import register_converter


class AnyIdConverter:
    """One or more characters of any kind, "/" and newlines included."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnyIdConverter, "anyid")
