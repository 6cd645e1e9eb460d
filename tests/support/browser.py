"""A real headless browser for the UI tests: Debian's chromium driven by selenium through
Debian's chromedriver (scripts/browser-deps installs both). The driver path is given, so
Selenium Manager never downloads a browser or a driver.

    with chrome() as driver:
        login(driver, "http://127.0.0.1:8080", "admin", password)
        driver.get("http://127.0.0.1:8080/dlc/")
        driver.save_screenshot("/tmp/dlc.png")
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1400, 1000)


class BrowserUnavailable(Exception):
    pass


def missing() -> str | None:
    """Why no browser can run here (a reason to skip with), or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: run scripts/browser-deps (Debian's chromium and chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def chrome(*, width: int = WINDOW[0], height: int = WINDOW[1]) -> Iterator[Any]:
    """A headless chromium (selenium webdriver.Chrome), quit on exit."""
    why = missing()
    if why:
        raise BrowserUnavailable(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_window_size(width, height)
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def token(base_url: str, username: str, password: str, timeout: float = 30) -> str:
    """A JWT from Airflow's auth manager: POST {base_url}/auth/token (201 {"access_token"})."""
    url = f"{base_url.rstrip('/')}/auth/token"
    request = urllib.request.Request(url, data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"POST {url} as {username!r}: HTTP {exc.code} {exc.read()[:300]!r}") from exc
    if status not in (200, 201):
        raise RuntimeError(f"POST {url} as {username!r}: HTTP {status} {body[:300]!r}")
    return json.loads(body)["access_token"]


def login(driver: Any, base_url: str, username: str, password: str) -> str:
    """Log the browser in to Airflow: get a token and set it as the `_token` cookie (path /),
    as Airflow's own login page does. Returns the token."""
    jwt = token(base_url, username, password)
    driver.get(f"{base_url.rstrip('/')}/auth/login")  # a cookie is set for the page's origin
    driver.add_cookie({"name": "_token", "value": jwt, "path": "/"})
    return jwt
