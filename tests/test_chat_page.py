"""The chat page at / of specframe serve: its files are served openly and name no address elsewhere (synthetic
model); in headless Chromium against a real model, an answer streams in with its drafted tokens tinted by drafter,
counted as the response's statistics count them (real_model)."""

from __future__ import annotations

import json
import os
import pathlib
import re

import httpx
import pytest
from test_real_models import CODE_EDIT, with_fixed_lengths
from test_server import server_config, serving

from specframe.files import atomic_write
from specframe.serve.app import STATIC

REPO = pathlib.Path(__file__).resolve().parent.parent
KEY = "sesame"
CHROMIUM = "/usr/bin/chromium"     # Debian's package (.ci/run installs it): Playwright downloads no browser here
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT_COPY = "SPECFRAME_CHAT_SCREENSHOT"   # where to copy the screenshot too (the README's: docs/images/)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory, target_path, draft_path):
    config = server_config(tmp_path_factory.mktemp("page") / "config.toml", target_path, draft_path, 512, 16,
                           f'api_key = "{KEY}"')
    with serving(config) as running:
        yield running


def test_the_page_and_its_files_are_served_without_the_key_and_name_no_other_address(keyed_server):
    url = keyed_server.url
    page = httpx.get(url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assets = sorted(re.findall(r'(?:src|href)="([^"]+)"', page.text))
    assert assets == ["data:,", "static/app.js", "static/style.css"]     # no icon asked for
    assets.remove("data:,")
    types = {"static/app.js": "javascript", "static/style.css": "text/css"}
    for asset in assets:
        response = httpx.get(f"{url}/{asset}")
        assert response.status_code == 200 and types[asset] in response.headers["content-type"]
    shipped = sorted(path.name for path in STATIC.iterdir())
    assert shipped == ["app.js", "index.html", "style.css"]
    for name in shipped:
        text = (STATIC / name).read_text()
        assert "http://" not in text and "https://" not in text and "//" + "cdn" not in text, name
    # The page is open; what it calls is not.
    assert httpx.get(url + "/metrics").status_code == 401 and httpx.get(url + "/props").status_code == 401
    props = httpx.get(url + "/props", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [(d["name"], d["type"]) for d in props["drafters"]] == [("prompt-lookup", "prompt-lookup"),
                                                                   ("ngram-mod", "ngram-mod"),
                                                                   ("draft-model", "draft-model")]
    assert props["drafters"][1]["params"]["n_match"] == 3 and props["drafters"][2]["params"]["p_min"] == 0.2


def sse_chunks(body: str) -> list[dict]:
    lines = [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def launch(playwright, profile: pathlib.Path):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium), as .ci/run does")
    return playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                         args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 860})


@pytest.mark.real_model
def test_in_chromium_an_answer_streams_in_tinted_by_drafter_as_the_statistics_count(tmp_path):
    from playwright.sync_api import sync_playwright

    config = with_fixed_lengths(REPO / "config.example.toml", tmp_path)
    with serving(config, max_seconds=600, api_key=KEY) as server, sync_playwright() as playwright:
        browser = launch(playwright, tmp_path / "profile")
        page = browser.pages[0] if browser.pages else browser.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda m: problems.append(f"console: {m.text}")
                if m.type == "error" and "401" not in m.text else None)    # a 401: asked before it had the key
        elsewhere: list[str] = []
        page.on("request", lambda r: None if r.url.startswith(server.url + "/") else elsewhere.append(r.url))

        page.goto(server.url + "/")
        page.wait_for_function("document.getElementById('drafters').textContent.includes('API key')")
        page.fill("#api-key", KEY)
        page.press("#api-key", "Tab")     # a change event: the page stores the key and asks again
        page.wait_for_selector("#drafters details")
        assert page.locator("#drafters summary").all_inner_texts()[0].strip() == "copy-cursor"
        page.fill("#input", CODE_EDIT)
        with page.expect_response(lambda r: r.url.endswith("/v1/chat/completions"), timeout=300_000) as answer:
            page.click("#send")
        chunks = sse_chunks(answer.value.text())
        page.wait_for_function("document.querySelector('.message.assistant .stats').textContent"
                               ".includes('tokens/s')", timeout=60_000)
        page.wait_for_selector("#server-stats table")

        spans = [span for chunk in chunks for span in chunk["choices"][0].get("specframe", {}).get("spans", [])]
        last = chunks[-1]
        accepted = {name: d["accepted_tokens"] for name, d in last["drafters"].items() if d["accepted_tokens"]}
        assert len(accepted) >= 2, f"fewer than two drafters had drafts accepted: {last['drafters']}"
        legend = {entry.get_attribute("data-drafter"): int(entry.get_attribute("data-tokens"))
                  for entry in page.locator(".message.assistant .legend .entry").all()}
        assert {name: n for name, n in legend.items() if name} == accepted
        target_tokens = sum(span["tokens"] for span in spans if span["drafter"] is None)
        assert legend[""] == target_tokens and sum(legend.values()) >= last["timings"]["predicted_n"]
        tinted = page.locator(".message.assistant .tint")
        written = {span["drafter"] for span in spans if span["drafter"] is not None and span["text"].strip()}
        assert {element.get_attribute("data-drafter") for element in tinted.all()} == written
        assert "def rectangle_area(" in page.inner_text(".message.assistant .content")
        stats = page.inner_text(".message.assistant .stats")
        assert f"{last['timings']['draft_n']} drafted, {last['timings']['draft_n_accepted']} accepted" in stats
        assert "tokens per target pass" in stats

        background = "getComputedStyle(document.querySelector('.message.assistant .tint')).backgroundColor"
        assert page.evaluate(background) != "rgba(0, 0, 0, 0)"
        page.uncheck("#tint")
        assert page.evaluate(background) == "rgba(0, 0, 0, 0)"
        page.check("#tint")
        assert page.evaluate(background) != "rgba(0, 0, 0, 0)"

        screenshot = tmp_path / "chat-page.png"
        page.screenshot(path=str(screenshot))
        print(f"screenshot: {screenshot}")
        if os.environ.get(SCREENSHOT_COPY):
            atomic_write(os.environ[SCREENSHOT_COPY], screenshot.read_bytes())
            print(f"screenshot copied to {os.environ[SCREENSHOT_COPY]}")
        browser.close()
        assert not problems, problems
        assert not elsewhere, elsewhere
