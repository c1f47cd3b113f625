"""Check that a built documentation site loads nothing from the network.

    python scripts/check_site_offline.py [SITE_DIR]

Reads every HTML and CSS file under SITE_DIR (default ``site``) and prints one line per
script, stylesheet, font, image or CSS import that names an http(s) URL; exits with 1 if
there is any, 0 (and one ``ok`` line) if none. Links that a reader follows (``<a href>``)
are not loads, and may point anywhere.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

REMOTE = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
# In CSS: url(...) and @import "..." (fonts, images, other stylesheets).
CSS_LOADS = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.IGNORECASE)
# What each tag loads from, by attribute; <link> only for what it fetches to render.
LOADING = {"script": "src", "img": "src", "iframe": "src", "source": "src"}
LINK_LOADS = {"stylesheet", "preload", "icon", "modulepreload", "manifest", "prefetch"}


class _Loads(HTMLParser):
    """The URLs an HTML page loads as it renders."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag in LOADING and LOADING[tag] in values:
            self.urls.append(values[LOADING[tag]])
        elif tag == "link" and LINK_LOADS & set(values.get("rel", "").lower().split()):
            self.urls.append(values.get("href", ""))
        self._in_style = tag == "style"
        if "style" in values:
            self.urls.extend(css_loads(values["style"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls.extend(css_loads(data))


def css_loads(text: str) -> list[str]:
    return [url or imported for url, imported in CSS_LOADS.findall(text)]


def remote_loads(site: Path) -> list[str]:
    """``FILE: URL`` for every load of an http(s) URL under `site`."""
    found: list[str] = []
    for path in sorted(site.rglob("*")):
        if path.suffix == ".html":
            parser = _Loads()
            parser.feed(path.read_text(encoding="utf-8"))
            urls = parser.urls
        elif path.suffix == ".css":
            urls = css_loads(path.read_text(encoding="utf-8"))
        else:
            continue
        found.extend(f"{path.relative_to(site)}: {url}" for url in urls if REMOTE.match(url))
    return found


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "site")
    if not site.is_dir():
        sys.stderr.write(f"{site} is not a directory: build the site first (make docs)\n")
        return 2
    found = remote_loads(site)
    for line in found:
        sys.stdout.write(f"{line}\n")
    if found:
        return 1
    sys.stdout.write(f"ok: {site} loads nothing from the network\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
