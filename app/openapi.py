"""Write the committed ``openapi.yaml``: ``python -m app.openapi``."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from app.config import Settings
from app.main import create_app

SPEC_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"


def render() -> str:
    """The app's OpenAPI document as YAML, independent of the environment it is run in."""
    app = create_app(Settings(database_url="sqlite://", auth_enabled=False))
    return yaml.safe_dump(app.openapi(), sort_keys=False, allow_unicode=True, width=100)


def main() -> None:
    SPEC_PATH.write_text(render(), encoding="utf-8")
    sys.stderr.write(f"wrote {SPEC_PATH}\n")


if __name__ == "__main__":
    main()
