"""Browser tests in Debian's chromium, driven by Playwright.

(a) A small report built in a temp dir: ``index.html`` and every report it links load from
``file://`` with every image decoded (naturalWidth > 0), no console error, no failed request,
and every link resolving (a local file, or an anchor on its page).
(b) JupyterLab on 127.0.0.1 (free port, token) with the suite's lab settings: open
``whatif.py`` (jupytext's notebook view), Run All Cells from the menu, move the ``cache GiB``
slider with the keyboard and wait for the widget's figure to change; then shut the server down
and check that no process it started is left.

The browser is the system chromium (``.ci/run`` and ``make test`` install it as root); nothing is
downloaded at test time (no ``playwright install``). Without chromium or Playwright these tests
skip, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from moeroof.core.paths import NOTEBOOKS_DIR

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
#: the flags that work on a closed network as root (no sandbox, no background connections)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
#: small parameters: each notebook renders in seconds
SMALL = {
    "union_curve": {"b_max": 64, "model_layers": 4, "bootstrap": 10},
    "whatif": {"b_max": 32, "trace_steps": 16, "trace_layers": 2},
}
TIMEOUT_MS = 30_000


def _missing(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: .ci/run installs it, so a missing browser is a failure)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        _missing("no chromium on PATH: apt-get install chromium chromium-driver")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as pw:
        # Playwright gives every launch a fresh, temporary --user-data-dir
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, timeout=TIMEOUT_MS)
        try:
            yield b
        finally:
            b.close()


# ----------------------------------------------------------------------------- (a) report site


@pytest.fixture(scope="module")
def small_site(tmp_path_factory):
    """reports/ and figures/ side by side in a temp dir, as `make report` lays them out."""
    from moeroof.present.report import render
    from moeroof.present.site import build_index

    root = tmp_path_factory.mktemp("site")
    reports, figures = root / "reports", root / "figures"
    old = os.environ.get("MOEROOF_FIGURES_DIR")
    os.environ["MOEROOF_FIGURES_DIR"] = str(figures)  # the kernels inherit it
    try:
        for name, params in SMALL.items():
            render(NOTEBOOKS_DIR / f"{name}.py", reports, params)
    finally:
        if old is None:
            os.environ.pop("MOEROOF_FIGURES_DIR", None)
        else:
            os.environ["MOEROOF_FIGURES_DIR"] = old
    return build_index(reports, figures)


def _check_page(page, url: str) -> list[str]:
    """Load ``url``; return the local .html pages it links. Asserts images, links, no errors."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url} ({r.failure})"))
    page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    images = page.eval_on_selector_all(
        "img", "els => els.map(e => ({src: e.getAttribute('src').slice(0, 80), ok: e.complete && e.naturalWidth > 0}))"
    )
    broken = [i["src"] for i in images if not i["ok"]]
    assert not broken, f"{url}: images that did not load: {broken}"
    links = page.eval_on_selector_all("a[href]", "els => els.map(e => ({href: e.getAttribute('href'), abs: e.href}))")
    ids = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
    pages = []
    for link in links:
        target, fragment = urldefrag(link["abs"])
        parsed = urlparse(target)
        if parsed.scheme in ("http", "https"):
            pytest.fail(f"{url}: link to the network {link['href']!r}: a report must read offline")
        assert parsed.scheme == "file", f"{url}: unexpected link {link['href']!r}"
        path = Path(unquote(parsed.path))
        assert path.is_file(), f"{url}: link {link['href']!r} points at a missing file {path.name}"
        if fragment and target == urldefrag(url)[0]:
            assert unquote(fragment) in ids, f"{url}: anchor #{fragment} has no element"
        if path.suffix == ".html" and target != urldefrag(url)[0]:
            pages.append(target)
    assert not errors, f"{url}: {errors}"
    return sorted(set(pages))


def test_report_index_and_linked_reports_load(browser, small_site):
    start = time.monotonic()
    index_url = small_site.resolve().as_uri()
    page = browser.new_page()
    try:
        linked = _check_page(page, index_url)
    finally:
        page.close()
    assert {Path(urlparse(u).path).name for u in linked} == {f"{n}.html" for n in SMALL}
    n_images = 0
    for url in linked:
        page = browser.new_page()
        try:
            _check_page(page, url)
            n_images += page.locator("img").count()
        finally:
            page.close()
    assert n_images >= len(SMALL), "the reports hold no figures"
    assert time.monotonic() - start < 60


# ----------------------------------------------------------------------------- (b) JupyterLab


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> set[int]:
    psutil = pytest.importorskip("psutil")
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _alive(pid: int) -> bool:
    psutil = pytest.importorskip("psutil")
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _lab_settings_dir() -> Path:
    """The app settings of this environment's JupyterLab, where the Makefile writes overrides.json."""
    return Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"


def test_whatif_controls_redraw_in_jupyterlab(browser, tmp_path):
    overrides = _lab_settings_dir() / "overrides.json"
    viewers = {}
    if overrides.is_file():
        viewers = (
            json.loads(overrides.read_text())
            .get("@jupyterlab/docmanager-extension:plugin", {})
            .get("defaultViewers", {})
        )
    assert viewers.get("python") == "Jupytext Notebook", (
        f"{overrides} does not open .py files as notebooks: run make (its bootstrap writes it)"
    )
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(NOTEBOOKS_DIR / "whatif.py", root / "whatif.py")  # lab may autosave: never into the repo
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        MOEROOF_FIGURES_DIR=str(tmp_path / "figures"),  # the notebook's static cell saves a figure
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),  # no user settings of this machine
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        IPYTHONDIR=str(tmp_path / "ipython"),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp_path / "lab.log").open("wb")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started: set[int] = set()
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None, f"jupyter lab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}"
                assert time.monotonic() < deadline, "jupyter lab did not answer within 30 s"
                time.sleep(0.2)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(TIMEOUT_MS)
        try:
            page.goto(f"{base}/lab/tree/whatif.py?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell")  # jupytext's notebook view, not the editor
            # the kernel named in the notebook (python3) starts with it; run once it is idle
            page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            figure = page.locator(".widget-output img").first  # the figure the controls redraw
            try:
                figure.wait_for(state="attached", timeout=60_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "whatif-timeout.png"))
                print(f"screenshot: {tmp_path / 'whatif-timeout.png'}")
                raise
            started = _descendants(proc.pid)  # the kernel (and anything it started)
            assert started, "no kernel process under the server"
            before = figure.get_attribute("src")
            slider = page.locator(".widget-slider", has=page.locator("label", has_text="cache GiB"))
            slider.scroll_into_view_if_needed()
            readout = slider.locator(".widget-readout").inner_text()
            slider.locator(".noUi-handle").focus()
            page.keyboard.press("ArrowRight")  # one step: 30 → 31 GiB
            page.wait_for_function(
                "before => { const i = document.querySelector('.widget-output img');"
                " return i !== null && i.getAttribute('src') !== before; }",
                arg=before,
            )
            assert slider.locator(".widget-readout").inner_text() != readout
            after = page.locator(".widget-output img").first.get_attribute("src")
            assert after.startswith("data:image/png") and after != before
            page.screenshot(path=str(tmp_path / "whatif-after.png"))
        finally:
            page.close()
        # shut down the way a user would (the server stops its kernels), then check
        req = urllib.request.Request(f"{base}/api/shutdown", method="POST", headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(req, timeout=5).read()
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()
        # kernels run in their own sessions: end any the server left, by pid, and fail on them
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in started if _alive(p)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind by jupyter lab: {left}"
    try:
        os.killpg(proc.pid, 0)
        group_left = True
    except ProcessLookupError:
        group_left = False
    assert not group_left, "the jupyter lab process group is still alive"
    assert time.monotonic() - start < 90
