"""The attention explorer in a real browser: headless Chromium, driven by selenium through the system chromedriver.

The test opens the page from disk, picks a layer and head (the selects, and a thumbnail), clicks a token, reads
every token's shading back from the DOM and compares it with attention_maps(model, ) to 1e-4; and times a 512-token
page. An encoder-decoder's page: a clicked target token shades every source token by cross_attention_maps' weight.
Not in the default run (pytest -m browser; .ci/run installs Debian's chromium and chromium-driver first).
"""
import shutil
import time

import pytest
import torch

from conftest import tiny_args, tiny_model
from insight.attention_maps import attention_maps, cross_attention_maps

pytestmark = pytest.mark.browser

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1300,900"]
READ_SHADING = ("return [...document.querySelectorAll(arguments[0])]"
                ".map(s => [s.dataset.weight, s.style.backgroundColor])")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no Chromium and chromedriver on this machine: apt-get install chromium chromium-driver "
                    "(what .ci/run does)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROME_FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chrome-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def decoder_run(corpus, tmp_path_factory):
    import train

    out = tmp_path_factory.mktemp("explorer-browser") / "dec"
    train.main(tiny_args(corpus, out, "--max_iters=4", "--eval_interval=4"))
    return out


def open_page(driver, path):
    driver.get(path.as_uri())
    assert driver.find_element("tag name", "body").get_attribute("data-ready") == "1"
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def choose(driver, layer, head):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "layer")).select_by_value(str(layer))
    Select(driver.find_element("id", "head")).select_by_value(str(head))


def shading(driver, tokens=".tok"):
    """[(weight, background alpha)] of every token (every source token: tokens='.src'), as the DOM holds them."""
    out = []
    for weight, colour in driver.execute_script(READ_SHADING, tokens):
        alpha = float(colour.rsplit(",", 1)[1].rstrip(")")) if colour.startswith("rgba") else None
        out.append((float(weight), alpha))
    return out


def check_row(got, want: torch.Tensor, query: int | None):
    """query: the token that is outlined, not shaded (None: a cross-attention page, where every key is shaded)."""
    weights = torch.tensor([w for w, _ in got])
    torch.testing.assert_close(weights, want.float(), atol=1e-4, rtol=0)
    for s, (w, alpha) in enumerate(got):
        if s != query:  # the others' opacity is sqrt(weight)
            assert alpha is None and w < 1e-4 or abs(alpha - w ** 0.5) < 5e-3, (s, w, alpha)


def test_clicked_token_shades_what_the_chosen_head_attends_to(browser, decoder_run, tmp_path):
    import visualize
    from inference.checkpoint import load_for_inference, path_in

    text = "ROMEO:\nLove nigh"
    page = tmp_path / "dec.html"
    visualize.main([f"--out_dir={decoder_run}", f"--text={text}", f"--html={page}"])
    model, tokenizer = load_for_inference(path_in(str(decoder_run), "best"), torch.device("cpu"))[:2]
    maps = attention_maps(model, torch.tensor([tokenizer.encode(text)]))[:, 0]  # (L, H, T, T)
    open_page(browser, page)
    query = 9
    choose(browser, 1, 0)
    browser.find_element("id", f"tok-{query}").click()  # pins the token
    check_row(shading(browser), maps[1, 0, query], query)
    assert all(w == 0 for w, _ in shading(browser)[query + 1:])  # a decoder never looks ahead
    choose(browser, 1, "mean")
    check_row(shading(browser), maps[1].mean(0)[query], query)
    browser.find_element("css selector", "#grid canvas[data-layer='0'][data-head='1']").click()  # a thumbnail
    assert browser.find_element("id", "layer").get_attribute("value") == "0"
    assert browser.find_element("id", "head").get_attribute("value") == "1"
    check_row(shading(browser), maps[0, 1, query], query)
    score = browser.find_element("id", "score-0-1").text
    assert score.startswith("P ") and " C " in score


def test_encoder_page_shades_both_sides(browser, tmp_path):
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    model = tiny_model(causal=False)
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    text = "abcdefghijkl"
    page = tmp_path / "enc.html"
    page.write_text(explorer_html(model, tokenizer, text))
    maps = attention_maps(model, torch.tensor([tokenizer.encode(text)]))[:, 0]
    open_page(browser, page)
    choose(browser, 0, 1)
    browser.find_element("id", "tok-3").click()
    got = shading(browser)
    check_row(got, maps[0, 1, 3], 3)
    assert all(w > 0 for w, _ in got[4:])  # bidirectional: the future is shaded too


def test_a_page_without_induction_scores_loads_and_shades(browser, tmp_path):
    """A context too short for the induction probe: the page has no scores to caption its thumbnails with."""
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    model = tiny_model(block_size=3)
    page = tmp_path / "short.html"
    page.write_text(explorer_html(model, CharTokenizer("abc"), "abc"))
    open_page(browser, page)
    choose(browser, 1, 0)
    browser.find_element("id", "tok-2").click()
    check_row(shading(browser), attention_maps(model, torch.tensor([[0, 1, 2]]))[1, 0, 0, 2], 2)
    assert browser.find_element("id", "score-1-0").text == ""
    assert not browser.find_element("id", "scores-note").is_displayed()


def test_clicked_target_token_shades_the_source_tokens_it_reads(browser, seq2seq_run, tmp_path):
    import visualize
    from inference.checkpoint import load_for_inference, path_in

    page = tmp_path / "s2s.html"
    visualize.main([f"--out_dir={seq2seq_run}", "--source=abcdefgh", "--target=hgfedcba", f"--html={page}"])
    model, tokenizer = load_for_inference(path_in(str(seq2seq_run), "best"), torch.device("cpu"))[:2]
    stop = tokenizer.stop_id
    source = torch.tensor([tokenizer.encode("abcdefgh")])  # (1, S)
    target_in = torch.tensor([[stop] + tokenizer.encode("hgfedcba")])  # (1, T): STOP + the target shifted right
    maps = cross_attention_maps(model, source, target_in)[:, 0]  # (L, H, T, S): T = 9 (the last writes STOP)
    open_page(browser, page)
    assert [e.text for e in browser.find_elements("css selector", ".src")] == list("abcdefgh")
    assert browser.find_element("id", "tok-8").text == "[STOP]"
    for layer, head, query in ((1, 0, 2), (0, 1, 8)):
        choose(browser, layer, head)
        browser.find_element("id", f"tok-{query}").click()  # pins the target token
        check_row(shading(browser, ".src"), maps[layer, head, query], None)
        queries = browser.execute_script(READ_SHADING, ".tok")
        assert all(w is None and colour == "" for w, colour in queries)  # target tokens: outlined, never shaded
        browser.find_element("id", f"tok-{query}").click()  # unpins it
    choose(browser, 1, "mean")
    browser.find_element("id", "tok-5").click()
    check_row(shading(browser, ".src"), maps[1].mean(0)[5], None)
    browser.find_element("css selector", "#grid canvas[data-layer='0'][data-head='0']").click()  # a thumbnail
    check_row(shading(browser, ".src"), maps[0, 0, 5], None)
    assert browser.find_element("id", "score-0-0").text == ""  # no induction scores for cross-attention heads


def test_512_tokens_load_and_shade_quickly(browser, tmp_path):
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    model = tiny_model(block_size=512, n_layer=4, n_head=4, n_embd=64)
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    text = "".join(chr(97 + (i * 7) % 26) for i in range(512))
    page = tmp_path / "long.html"
    page.write_text(explorer_html(model, tokenizer, text))
    t0 = time.perf_counter()
    open_page(browser, page)  # returns after the load event: the weights decoded, 20 thumbnails drawn
    load_s = time.perf_counter() - t0
    choose(browser, 3, 2)
    shade_ms = browser.execute_script(
        "const t = performance.now(); document.getElementById('tok-511').click(); return performance.now() - t;")
    maps = attention_maps(model, torch.tensor([tokenizer.encode(text)]))[:, 0]
    check_row(shading(browser), maps[3, 2, 511], 511)
    print(f"512 tokens, 4 layers x 4 heads: page loaded in {load_s:.2f} s, a click shaded in {shade_ms:.1f} ms, "
          f"{page.stat().st_size / 1e6:.1f} MB")
    assert load_s < 20 and shade_ms < 500


def test_blank_lines_stay_on_the_page(browser, tmp_path):
    """A gpt2 token of two newlines ('\\n\\n', two arrows) breaks the line twice: the text shown, arrows left out,
    is the text given, blank lines and all."""
    from data.tokenizer import gpt2_tokenizer
    from insight.explorer_html import explorer_html

    tokenizer = gpt2_tokenizer()
    text = "ROMEO:\n\nLove,\n\n\nnight\nfalls"
    assert "\n\n" in [tokenizer.decode([i]) for i in tokenizer.encode(text)]
    page = tmp_path / "lines.html"
    page.write_text(explorer_html(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, text))
    open_page(browser, page)
    shown = browser.execute_script("return document.getElementById('text').innerText")
    assert shown.replace("\u21b5", "") == text
