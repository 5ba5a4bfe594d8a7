#!/usr/bin/env python3
"""Screenshot an `astra-core view` report with Debian's chromium (playwright drives it).

    .venv/bin/python scripts/screenshot_report.py report.html out.png [VIEW]

VIEW is the part after '#' in the report's address: '/' (the index, default), '/entry/3', '/compare/ID'.
Also imported by astra-core's browser test (launch, open_report, is_blank).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1000}


def launch(playwright):
    """Debian's chromium, headless (playwright cannot download its own browser here)."""
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: run make setup (it installs Debian's chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


def open_report(browser, report: Path, view: str = "/"):
    """A page showing `report` at `view`, once the report has drawn its records."""
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{Path(report).resolve().as_uri()}#{view}")
    page.wait_for_selector("#status:has-text('records')")
    page.errors = errors  # JavaScript errors seen on the page, for callers to assert on
    return page


def is_blank(png: bytes) -> bool:
    """True when the image has (almost) one colour: nothing was drawn."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 16)
    return colours is not None and len(colours) < 8


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    report, out = Path(argv[0]), Path(argv[1])
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = open_report(browser, report, argv[2] if len(argv) == 3 else "/")
        page.wait_for_timeout(200)
        png = page.screenshot(path=str(out))  # the first screen: what a reader sees on opening it
        browser.close()
    if is_blank(png):
        print(f"{out}: the screenshot is blank", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
