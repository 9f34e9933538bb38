"""Small pieces of wording shared by the spec's messages: a URL without its password, a YAML value's type."""

from __future__ import annotations

import re
from typing import Any


def redact_url(url: str) -> str:
    """The URL with any password (``user:PASSWORD@`` or ``?password=PASSWORD``) replaced by ***."""
    url = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def yaml_type(value: Any) -> str:
    """What a YAML value is, in the study file's words (list, string, int, ...)."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
