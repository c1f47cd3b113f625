"""The documentation's pages and code blocks, as tests read them to run what they show."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The address the pages name for the server; tests put their own server's in its place.
DOCS_URL = "http://127.0.0.1:8080"


def code_blocks(page: Path, language: str) -> list[str]:
    """The fenced blocks of `language` (``sh``, ``python``) in `page`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", page.read_text(), re.DOTALL | re.MULTILINE)
