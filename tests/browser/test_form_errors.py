"""Save on a form with several errors shows every one of them at once, with the count, and the
server's exact reason for a schedule under its field (visible on a phone, not only on hover); a cron
expression that never fires is told apart from a malformed one."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Browsing, Console, Served

pytestmark = pytest.mark.browser


def test_save_shows_a_bad_cron_a_bad_zone_and_a_blank_url_together(served: Served, browsing: Browsing) -> None:
    browsing.console.allow.append(r"status of 400")  # the preview's verdict on the expression
    page = browsing.new_page()
    before = len(served.ctx.store)
    page.goto(served.url + "/ui/tasks/new")
    expect(page.get_by_test_id("task-form")).to_be_visible()
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("61 * * * *")
    page.get_by_test_id("f-tz").fill("Mars/Olympus_Mons")
    page.get_by_test_id("f-url").fill("")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-count")).to_have_text("3 fields need attention.")
    expect(page.get_by_test_id("err-callback_url")).to_have_text("Required.")
    expect(page.get_by_test_id("err-timezone")).to_contain_text("Unknown time zone")
    expect(page.get_by_test_id("err-cron_expr")).to_contain_text("Not a valid cron expression")
    # the exact reason is on the page, not only in a tooltip
    expect(page.get_by_test_id("detail-cron_expr")).to_be_visible()
    expect(page.get_by_test_id("detail-cron_expr")).to_contain_text("the minute field '61' is not valid")
    assert len(served.ctx.store) == before  # nothing was sent

    # the URL fixed, the zone fixed: only the cron remains, and Save still refuses
    page.get_by_test_id("f-url").fill("http://127.0.0.1:9/x")
    page.get_by_test_id("f-tz").fill("UTC")
    expect(page.get_by_test_id("err-timezone")).to_have_count(0)
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-cron_expr")).to_contain_text("Not a valid cron expression")
    assert len(served.ctx.store) == before


def test_a_cron_that_never_fires_says_so(served: Served, browsing: Browsing) -> None:
    browsing.console.allow.append(r"status of 400")  # the preview's verdict on the expression
    page = browsing.new_page()
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-tz").fill("UTC")
    page.get_by_test_id("f-cron").fill("0 0 30 2 *")
    expect(page.get_by_test_id("err-cron_expr")).to_have_text(
        "This expression never fires (a day that does not exist, such as 30 February).")
    expect(page.get_by_test_id("detail-cron_expr")).to_contain_text("never fires")
    page.get_by_test_id("f-cron").fill("0 0 30 2")
    expect(page.get_by_test_id("err-cron_expr")).to_contain_text("Not a valid cron expression")
    page.get_by_test_id("f-cron").fill("0 0 28 2 *")
    expect(page.get_by_test_id("err-cron_expr")).to_have_count(0)
    expect(page.get_by_test_id("preview-list").locator("li")).to_have_count(5)


def test_a_cron_that_never_fires_says_so_in_chinese(served: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 400")  # the preview's verdict on the expression
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("lang").select_option("zh")
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-tz").fill("UTC")
    page.get_by_test_id("f-cron").fill("0 0 30 2 *")
    # told apart by the answer's reason, not by its (now Chinese) text
    expect(page.get_by_test_id("err-cron_expr")).to_have_text(
        "\u8be5\u8868\u8fbe\u5f0f\u6c38\u8fdc\u4e0d\u4f1a\u89e6\u53d1\uff08\u6307\u5b9a\u4e86\u4e0d\u5b58\u5728"
        "\u7684\u65e5\u671f\uff0c\u4f8b\u5982 2 \u6708 30 \u65e5\uff09\u3002")
    expect(page.get_by_test_id("detail-cron_expr")).to_contain_text("\u6c38\u4e0d\u89e6\u53d1")
