"""`pgrag ui` and `pgrag explain --html` in a real browser: headless Chromium from
the system's package manager (apt-get install chromium chromium-driver), driven
through Selenium, against `pgrag ui` processes on the bundled sample in a real
PostgreSQL, each connected as a role of its own under row-level security.

Without Chromium the tests skip, except under CI (CI set, or browser in
PGRAG_TEST_REQUIRE as .ci/run sets it), where they fail."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from urllib.parse import urlencode

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

import pgrag
from pgrag.cli import main
from pgrag.demo import SAMPLE_CORPUS, sample_documents
from tests.conftest import TEMPLATE, scratch_database, skip_unless_required
from tests.serving import as_role, free_port, listening

QUESTION = "When did Lothair II's mother die?"
HOSTILE_TEXT = ("Lothair II's letters <script>document.title='pwned'</script> were copied "
                "<img src=x onerror=\"document.title='pwned'\"> by hand.")
HOSTILE_TITLE = "Letters </title><b>bold</b>"


def need(*names: str) -> str:
    for name in names:
        if path := shutil.which(name):
            return path
    message = f"none of {', '.join(names)} is installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(message + ", and CI is set: the browser test must run here")
    skip_unless_required("browser", message)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def browser() -> Iterator:
    chromium = need("chromium", "chromium-browser", "google-chrome")
    driver_path = need("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        if os.environ.get("CI"):
            raise
        skip_unless_required("browser", "selenium is not installed")
    profile = tempfile.mkdtemp(prefix="pgrag-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(300)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.contextmanager
def ui(dsn: str) -> Iterator[str]:
    """`pgrag ui` in a process of its own, connected with ``dsn``."""
    port = free_port()
    with listening("ui", "--port", str(port), "--dsn", dsn, port=port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def site(pg_uri: str, template_uri: str) -> Iterator[dict[str, str]]:
    """The sample and a corpus holding a hostile document; role ``reader`` may read
    both, role ``outsider`` only the hostile one; row-level security on. Yields the
    database URI and a `pgrag ui` for each role."""
    with scratch_database(pg_uri, "pgrag_ui_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        db.corpus(SAMPLE_CORPUS).ingest(sample_documents(), progress=False)
        db.corpus("hostile").ingest([{"id": "h1", "title": HOSTILE_TITLE, "text": HOSTILE_TEXT}], progress=False)
        roles = {kind: f"pgrag_ui_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("reader", "outsider")}
        with psycopg.connect(uri, autocommit=True) as conn:
            for role in roles.values():
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        for role in roles.values():
            db.grant_reader(role)
        db.grant_corpus(roles["reader"], SAMPLE_CORPUS)
        db.grant_corpus(roles["reader"], "hostile")
        db.grant_corpus(roles["outsider"], "hostile")
        db.enable_tenant_isolation()
        db.close()
        try:
            with ui(as_role(uri, roles["reader"])) as reader, ui(as_role(uri, roles["outsider"])) as outsider:
                yield {"uri": uri, "reader": reader, "outsider": outsider}
        finally:
            with psycopg.connect(uri, autocommit=True) as conn:
                for role in roles.values():
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def texts(elements: list) -> list[str]:
    return [e.text for e in elements]


@pytest.mark.slow
def test_browser_asks_and_sees_two_methods_and_the_tigrag_picture(browser, site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(site["reader"] + "/")
    Select(browser.find_element(By.ID, "corpus")).select_by_value(SAMPLE_CORPUS)
    for box in browser.find_elements(By.CSS_SELECTOR, "input[name=method]"):
        if box.is_selected() != (box.get_attribute("value") in ("tigrag", "bm25")):
            box.click()
    browser.find_element(By.ID, "question").send_keys(QUESTION)
    browser.find_element(By.ID, "ask").click()
    WebDriverWait(browser, 300).until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.method"))

    sections = {s.get_attribute("data-method"): s for s in browser.find_elements(By.CSS_SELECTOR, "section.method")}
    assert set(sections) == {"tigrag", "bm25"}
    for section in sections.values():
        titles = texts(section.find_elements(By.CSS_SELECTOR, "li.hit .title"))
        assert "Lothair II" in titles, titles
        # each hit's own characters are highlighted inside its document's text
        for hit in section.find_elements(By.CSS_SELECTOR, "li.hit"):
            mark = hit.find_element(By.CSS_SELECTOR, ".doc mark").text
            assert mark and mark in hit.find_element(By.CSS_SELECTOR, ".doc").text
    lothair = next(h for h in sections["bm25"].find_elements(By.CSS_SELECTOR, "li.hit")
                   if h.find_element(By.CSS_SELECTOR, ".title").text == "Lothair II")
    assert "Lothair II" in lothair.find_element(By.CSS_SELECTOR, "mark").text
    assert re.search(r"chars \d+.\d+", lothair.find_element(By.CSS_SELECTOR, ".prov").text)

    # the TIGRAG picture, both hops: seeds, PPR tokens and chunks of hop 1, entities, then hop 2
    figure = browser.find_element(By.CSS_SELECTOR, "figure.picture[data-method=tigrag]")
    layers = {g.get_attribute("data-layer"): g for g in figure.find_elements(By.CSS_SELECTOR, "g.layer")}
    for key in ("question", "hop-1-seeds", "hop-1-tokens", "hop-1-chunks", "hop-1-entities", "hop-2-seeds",
                "hop-2-tokens", "hop-2-chunks", "hits"):
        assert key in layers, sorted(layers)
        assert layers[key].find_elements(By.CSS_SELECTOR, "g.item rect"), key
    items = lambda key: [t.get_attribute("textContent")  # noqa: E731
                         for t in layers[key].find_elements(By.CSS_SELECTOR, "g.item title")]
    assert "lothair" in items("hop-1-seeds")
    assert "Lothair II" in items("hop-1-chunks")
    assert figure.find_elements(By.CSS_SELECTOR, "g.edges line")
    assert figure.find_element(By.TAG_NAME, "svg").size["width"] > 500  # drawn, not an empty box
    browser.save_screenshot(str(tmp_path / "page.png"))


def test_browser_shows_a_hostile_document_as_text(browser, site):
    from selenium.webdriver.common.by import By

    browser.get(site["reader"] + "/ask?" + urlencode({"corpus": "hostile", "question": "Lothair letters copied",
                                                      "method": "bm25"}))
    [hit] = browser.find_elements(By.CSS_SELECTOR, "section.method[data-method=bm25] li.hit")
    assert hit.find_element(By.CSS_SELECTOR, ".title").text == HOSTILE_TITLE
    assert hit.find_element(By.CSS_SELECTOR, ".doc").text == HOSTILE_TEXT
    assert browser.title != "pwned" and "pwned" not in browser.execute_script("return document.title")
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.CSS_SELECTOR, "img, .hit b") == []


def test_browser_a_role_without_access_gets_an_error_page(browser, site):
    from selenium.webdriver.common.by import By

    browser.get(site["outsider"] + "/")
    assert [o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "#corpus option")] == ["hostile"]
    browser.get(site["outsider"] + "/ask?" + urlencode({"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                        "method": "bm25"}))
    error = browser.find_element(By.CSS_SELECTOR, "section.error")
    assert error.get_attribute("data-status") == "404"
    assert f"corpus '{SAMPLE_CORPUS}' does not exist" in error.find_element(By.CSS_SELECTOR, ".message").text
    assert browser.find_elements(By.CSS_SELECTOR, "li.hit") == []
    # the same corpus through the reader's page answers: the error is the role's, not the corpus's
    browser.get(site["reader"] + "/ask?" + urlencode({"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                      "method": "bm25"}))
    assert browser.find_elements(By.CSS_SELECTOR, "li.hit")


def test_browser_opens_explain_html_offline(browser, site, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "explain.html"
    result = CliRunner().invoke(main, ["explain", QUESTION, "--corpus", SAMPLE_CORPUS, "--method", "tigrag",
                                       "--dsn", site["uri"], "--html", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    # self-contained: no script, and no URL that would load anything
    assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:|//)""", html)
    browser.get(out.as_uri())
    figure = browser.find_element(By.CSS_SELECTOR, "figure.picture[data-method=tigrag]")
    layers = [g.get_attribute("data-layer") for g in figure.find_elements(By.CSS_SELECTOR, "g.layer")]
    assert "hop-1-chunks" in layers and "hop-2-chunks" in layers
    assert "Lothair II" in texts(browser.find_elements(By.CSS_SELECTOR, "li.hit .title"))
