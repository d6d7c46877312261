"""The console's side of keys and namespaces (docs/api.md#keys-and-roles): sign in with a key, who
is signed in, the namespace switcher, actions offered by role, the Audit page and the admin page of
keys and namespaces. One node with a bootstrap token, two namespaces and a key of each role."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Browsing, Console, Served, serve_ui

pytestmark = pytest.mark.browser

TOKEN = "signin-bootstrap-token"
CB = "http://127.0.0.1:9/signin"


@dataclass
class Keys:
    served: Served
    secrets: dict[str, str]
    """name -> secret: admin (every namespace), writer and reader (namespace pay)."""
    tasks: dict[str, str]
    """namespace -> the id of a task there."""

    def call(self, method: str, path: str, body: Any = None, key: str = TOKEN) -> Any:
        st, out = self.served.api(method, path, body, token=key)
        assert st in (200, 201), (method, path, st, out)
        return out


def seed(s: Served) -> Keys:
    """Namespaces pay and ops with a task each, and a key of each role."""
    k = Keys(s, {}, {})
    for ns in ("pay", "ops"):
        k.call("POST", "/namespaces", {"name": ns})
        k.tasks[ns] = k.call("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB,
                                               "namespace": ns, "scene": f"in-{ns}"})["id"]
    for name, role, nss in (("ada-admin", "admin", ["*"]), ("wes-writer", "writer", ["pay"]),
                            ("rea-reader", "reader", ["pay"])):
        k.secrets[name] = k.call("POST", "/keys", {"name": name, "role": role, "namespaces": nss})["secret"]
    return k


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    with serve_ui(tmp_path_factory.mktemp("signin"), token=TOKEN) as s:
        yield seed(s)


@pytest.fixture(autouse=True)
def _asked_for_a_key(console: Console) -> None:
    """Each test opens the console without a key first: the node's 401 is the sign-in's cue."""
    console.allow.append(r"status of 401")


def sign_in(page: Page, keys: Keys, name: str, path: str = "/ui/tasks", remember: bool = False) -> None:
    page.goto(keys.served.url + path)
    expect(page.get_by_test_id("login-form")).to_be_visible()
    page.get_by_test_id("f-token").fill(keys.secrets.get(name, name))
    if remember:
        page.get_by_test_id("f-remember").check()
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("login-form")).to_have_count(0)


def test_a_401_asks_for_a_key_the_header_names_it_and_sign_out_forgets_it(keys: Keys, page: Page) -> None:
    page.goto(keys.served.url + "/ui/tasks")
    page.get_by_test_id("f-token").fill("mlk_0123456789abcdef_wrong")
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("login-error")).to_be_visible()
    sign_in(page, keys, "rea-reader")
    expect(page.get_by_test_id("tasks-table")).to_be_visible()
    expect(page.get_by_test_id("who")).to_contain_text("rea-reader")
    expect(page.get_by_test_id("who-role")).to_have_text("reader")
    secret = keys.secrets["rea-reader"]
    assert page.evaluate("sessionStorage.getItem('molens.token')") == secret
    assert page.evaluate("localStorage.getItem('molens.token')") is None
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("login-form")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('molens.token')") is None
    sign_in(page, keys, "wes-writer", remember=True)
    expect(page.get_by_test_id("who-role")).to_have_text("writer")
    assert page.evaluate("localStorage.getItem('molens.token')") == keys.secrets["wes-writer"]
    assert page.evaluate("sessionStorage.getItem('molens.token')") is None
    page.reload()
    expect(page.get_by_test_id("who")).to_contain_text("wes-writer")
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("login-form")).to_be_visible()
    assert page.evaluate("localStorage.getItem('molens.token')") is None


def test_an_open_node_signs_nobody_in_and_says_it_is_open(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "open") as s:
        page.goto(s.url + "/ui/tasks")
        expect(page.get_by_test_id("tasks-table")).to_be_visible()
        expect(page.get_by_test_id("who")).to_contain_text("open node")
        expect(page.get_by_test_id("who-role")).to_have_text("admin")
        expect(page.get_by_test_id("sign-out")).to_have_count(0)
        expect(page.get_by_test_id("nav-admin")).to_be_visible()


def test_the_namespace_switcher_narrows_the_lists_keeps_to_the_address_and_fills_the_new_task_form(
    keys: Keys, page: Page
) -> None:
    sign_in(page, keys, "ada-admin")
    rows = page.locator("tr[data-task-id]")
    expect(rows).to_have_count(2)
    expect(page.get_by_test_id("ns-switch").locator("option")).to_have_text(["All namespaces", "default", "ops", "pay"])
    page.get_by_test_id("ns-switch").select_option("pay")
    expect(page).to_have_url(re.compile(r"[?&]ns=pay\b"))
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-task-id="{keys.tasks["pay"]}"]')).to_be_visible()
    assert page.evaluate("localStorage.getItem('molens.namespace')") == "pay"
    page.get_by_test_id("nav-deadLetters").click()
    expect(page).to_have_url(re.compile(r"/ui/dead-letters\?(.*&)?ns=pay\b"))
    page.goto(keys.served.url + "/ui/tasks/new")
    expect(page).to_have_url(re.compile(r"ns=pay\b"))
    expect(page.get_by_test_id("f-namespace")).to_have_value("pay")
    page.goto(keys.served.url + "/ui/tasks?ns=ops")  # an address names another
    expect(page.get_by_test_id("ns-switch")).to_have_value("ops")
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-task-id="{keys.tasks["ops"]}"]')).to_be_visible()
    page.get_by_test_id("ns-switch").select_option("")
    expect(rows).to_have_count(2)
    expect(page).not_to_have_url(re.compile(r"ns="))
    assert page.evaluate("localStorage.getItem('molens.namespace')") is None


def test_a_key_of_one_namespace_is_offered_only_its_namespace_and_pages(keys: Keys, page: Page, console: Console) -> None:
    console.allow.append(r"status of 403")  # another namespace's flow, refused by the node
    sign_in(page, keys, "wes-writer", path="/ui/")
    expect(page).to_have_url(re.compile(r"/ui/tasks"))  # the dashboard is node-wide
    expect(page.get_by_test_id("ns-switch").locator("option")).to_have_text(["All namespaces", "pay"])
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    for name in ("dashboard", "latency", "timewheel", "workers", "cluster", "admin"):
        expect(page.get_by_test_id(f"nav-{name}")).to_have_count(0)
    for name in ("tasks", "executions", "deadLetters", "audit", "flows"):
        expect(page.get_by_test_id(f"nav-{name}")).to_have_count(1)
    # its namespace's own flows are its to set (docs/api.md#flows); the shared ones are not shown
    page.goto(keys.served.url + "/ui/flows")
    expect(page.get_by_test_id("flows-mine")).to_contain_text("(pay)")
    expect(page.get_by_test_id("fl-key")).to_have_attribute("placeholder", "pay~orders")
    page.get_by_test_id("fl-key").fill("pay~orders")
    page.get_by_test_id("fl-rate").fill("5")
    page.get_by_test_id("fl-save").click()
    expect(page.locator('tr[data-flow="pay~orders"]').get_by_test_id("flow-limits")).to_contain_text("5/s")
    expect(page.locator("tr[data-flow]")).to_have_count(1)
    page.get_by_test_id("fl-key").fill("ops~orders")  # another namespace's: refused by the node
    page.get_by_test_id("fl-save").click()
    expect(page.get_by_test_id("toasts")).to_contain_text("Your key may not do this")
    expect(page.locator("tr[data-flow]")).to_have_count(1)
    page.goto(keys.served.url + "/ui/latency")
    expect(page.get_by_test_id("refused")).to_be_visible()
    page.get_by_test_id("brand").click()
    expect(page).to_have_url(re.compile(r"/ui/tasks$"))
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    page.goto(keys.served.url + "/ui/tasks/new")
    expect(page.get_by_test_id("f-namespace").locator("option")).to_have_text(["pay"])


def test_a_reader_is_offered_no_change_and_a_writer_no_admin_page(keys: Keys, page: Page) -> None:
    sign_in(page, keys, "rea-reader")
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    expect(page.get_by_test_id("new-task")).to_have_count(0)
    page.goto(keys.served.url + f"/ui/tasks/{keys.tasks['pay']}")
    expect(page.get_by_test_id("read-only")).to_have_text("A reader key may not change anything")
    expect(page.get_by_test_id("task-actions")).to_have_count(0)
    expect(page.get_by_test_id("act-delete")).to_have_count(0)
    page.goto(keys.served.url + "/ui/dead-letters")
    expect(page.get_by_test_id("refresh")).to_be_visible()
    expect(page.get_by_test_id("redrive-all")).to_have_count(0)
    expect(page.get_by_test_id("delete-all")).to_have_count(0)
    page.goto(keys.served.url + "/ui/tasks/new")
    expect(page.get_by_test_id("refused")).to_be_visible()
    expect(page.get_by_test_id("task-form")).to_have_count(0)

    page.get_by_test_id("sign-out").click()
    sign_in(page, keys, "wes-writer")
    expect(page.get_by_test_id("new-task")).to_be_visible()
    page.goto(keys.served.url + f"/ui/tasks/{keys.tasks['pay']}")
    expect(page.get_by_test_id("act-delete")).to_be_visible()
    expect(page.get_by_test_id("read-only")).to_have_count(0)
    expect(page.get_by_test_id("nav-admin")).to_have_count(0)
    expect(page.get_by_test_id("nav-cluster")).to_have_count(0)
    page.goto(keys.served.url + "/ui/admin")
    expect(page.get_by_test_id("refused")).to_be_visible()


def test_the_audit_page_shows_who_changed_what_newest_first_with_filters_and_more(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "audit", token=TOKEN) as s:
        k = seed(s)
        k.call("POST", f"/tasks/{k.tasks['pay']}/pause", key=k.secrets["wes-writer"])
        k.call("PATCH", f"/tasks/{k.tasks['ops']}", {"scene": "patched"}, key=k.secrets["ada-admin"])
        many = {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB, "namespace": "ops"}
        k.call("POST", "/tasks/batch", {"tasks": [many] * 60})
        sign_in(page, k, "ada-admin", path="/ui/audit")
        rows = page.locator("tr[data-audit-id]")
        expect(rows).to_have_count(50)
        expect(rows.first.get_by_test_id("audit-action-cell")).to_have_text("Task created")
        # a create lists every field of the task, new values only: four, then the rest on demand
        created = rows.first.locator(".change")
        expect(created).to_have_count(4)
        expect(rows.first.get_by_test_id("change-old")).to_have_count(0)
        rows.first.get_by_test_id("audit-more-changes").click()
        expect(created.filter(has=page.locator("code.field", has_text="namespace"))).to_contain_text("ops")
        assert created.count() > 4
        expect(rows.first.get_by_test_id("audit-more-changes")).to_have_text("Fewer fields")
        page.get_by_test_id("audit-more").click()
        expect(rows).to_have_count(69)  # the 60, the 2 changes, and the seed's 2 namespaces, 2 tasks and 3 keys
        expect(page.get_by_test_id("audit-more")).to_have_count(0)
        expect(rows.last.get_by_test_id("audit-action-cell")).to_have_text("Namespace created")

        page.get_by_test_id("audit-action").select_option("task.patch")
        page.get_by_test_id("audit-apply").click()
        expect(page).to_have_url(re.compile(r"action=task\.patch"))
        expect(rows).to_have_count(1)
        change = rows.first.locator('[data-field="scene"]')
        expect(change.get_by_test_id("change-old")).to_have_text("in-ops")
        expect(change.get_by_test_id("change-new")).to_have_text("patched")
        expect(rows.first.get_by_test_id("audit-actor-cell")).to_have_text("ada-admin")

        page.get_by_test_id("audit-action").select_option("")
        page.get_by_test_id("audit-actor").fill("wes-writer")
        page.get_by_test_id("audit-apply").click()
        expect(rows).to_have_count(1)
        expect(rows.first.get_by_test_id("audit-action-cell")).to_have_text("Task paused")

        page.get_by_test_id("sign-out").click()
        sign_in(page, k, "rea-reader", path="/ui/audit")
        # a key of pay sees pay's entries only: its task's create and pause, none of the cluster's
        expect(rows).to_have_count(2)
        expect(page.get_by_test_id("audit-action-cell")).to_have_text(["Task paused", "Task created"])


def test_a_new_keys_secret_stays_until_the_admin_says_it_was_copied(tmp_path: Path, page: Page) -> None:
    """The secret is shown once: Esc, a click beside the dialog and Enter (the first focus) leave it
    open; only "I have copied it" closes it."""
    with serve_ui(tmp_path / "secret", token=TOKEN) as s:
        k = seed(s)
        sign_in(page, k, "ada-admin", path="/ui/admin")
        page.get_by_test_id("k-name").fill("kept-ci")
        page.get_by_test_id("k-ns-pay").check()
        page.get_by_test_id("k-create").click()
        dialog = page.get_by_test_id("secret-dialog")
        shown = page.get_by_test_id("new-secret")
        expect(shown).to_have_text(re.compile(r"^mlk_[0-9a-f]{16}_\S+$"))
        secret = shown.inner_text()
        page.keyboard.press("Escape")
        expect(shown).to_have_text(secret)
        page.mouse.click(5, 5)  # the backdrop, beside the dialog
        expect(shown).to_have_text(secret)
        page.keyboard.press("Enter")  # on the first focus
        expect(shown).to_have_text(secret)
        page.get_by_test_id("secret-done").focus()
        page.keyboard.press("Enter")  # not even on the button that closes it: a click is asked for
        expect(dialog).to_be_visible()
        expect(shown).to_have_text(secret)
        page.get_by_test_id("secret-done").click()
        expect(dialog).to_have_count(0)
        assert secret not in page.content()
        assert k.call("GET", "/whoami", key=secret)["name"] == "kept-ci"


def test_the_admin_page_makes_a_key_shows_its_secret_once_revokes_it_and_manages_namespaces(
    tmp_path: Path, desk: Browsing, page: Page
) -> None:
    desk.console.allow.append(r"status of 409")  # the delete of a namespace that holds a task
    with serve_ui(tmp_path / "admin", token=TOKEN) as s:
        k = seed(s)
        desk.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=s.url)
        sign_in(page, k, "ada-admin", path="/ui/admin")
        rows = page.locator("tr[data-key-id]")
        expect(rows).to_have_count(3)
        expect(page.locator('tr[data-key-name="rea-reader"]').get_by_test_id("key-role")).to_have_text("reader")
        expect(page.locator('tr[data-key-name="rea-reader"]').get_by_test_id("key-namespaces")).to_have_text("pay")
        expect(page.locator('tr[data-key-name="ada-admin"]').get_by_test_id("key-last-used")).not_to_have_text("—")
        expect(page.get_by_test_id("key-self")).to_have_count(1)
        expect(page.locator('tr[data-key-name="ada-admin"]').get_by_test_id("key-self")).to_have_text("you")
        expect(page.locator('tr[data-ns="default"]').get_by_test_id("ns-delete")).to_have_count(0)

        page.get_by_test_id("k-name").fill("new-ci")
        page.get_by_test_id("k-role").select_option("writer")
        page.get_by_test_id("k-ns-pay").check()
        page.get_by_test_id("k-create").click()
        shown = page.get_by_test_id("new-secret")
        expect(shown).to_have_text(re.compile(r"^mlk_[0-9a-f]{16}_\S+$"))
        secret = shown.inner_text()
        assert k.call("GET", "/whoami", key=secret)["name"] == "new-ci"
        page.get_by_test_id("copy-secret").click()
        expect(page.get_by_test_id("toast").filter(has_text="Secret copied.")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == secret
        page.get_by_test_id("secret-done").click()
        expect(page.get_by_test_id("secret-dialog")).to_have_count(0)
        assert secret not in page.content()  # shown once: gone with the dialog
        made = page.locator('tr[data-key-name="new-ci"]')
        expect(made.get_by_test_id("key-role")).to_have_text("writer")
        expect(rows).to_have_count(4)

        made.get_by_test_id("key-revoke").click()
        expect(page.get_by_test_id("confirm-dialog")).to_contain_text("new-ci")
        page.get_by_test_id("confirm-ok").click()
        expect(made).to_have_count(0)
        assert s.api("GET", "/whoami", token=secret)[0] == 401

        page.get_by_test_id("n-name").fill("ledger")
        page.get_by_test_id("n-creates_per_s").fill("5")
        page.get_by_test_id("n-save").click()
        ledger = page.locator('tr[data-ns="ledger"]')
        expect(ledger.get_by_test_id("ns-quotas")).to_have_text("Creates per second 5")
        ledger.get_by_test_id("ns-edit").click()
        expect(page.get_by_test_id("n-name")).to_be_disabled()
        page.get_by_test_id("n-max_pending_tasks").fill("100")
        page.get_by_test_id("n-save").click()
        expect(ledger.get_by_test_id("ns-quotas")).to_have_text("Pending tasks at most 100 · Creates per second 5")
        quotas = k.call("GET", "/namespaces/ledger")["quotas"]
        assert (quotas["max_pending_tasks"], quotas["creates_per_s"]) == (100, 5)
        expect(page.get_by_test_id("ns-switch").locator("option")).to_have_text(
            ["All namespaces", "default", "ledger", "ops", "pay"])

        page.locator('tr[data-ns="pay"]').get_by_test_id("ns-delete").click()
        page.get_by_test_id("confirm-ok").click()
        # keys still name it (and it holds a task): refused, in the server's words after the console's
        expect(page.get_by_test_id("admin-error")).to_contain_text("Not possible now: something still depends on it")
        expect(page.get_by_test_id("admin-error")).to_contain_text("namespace pay is named by API keys")
        expect(page.locator('tr[data-ns="pay"]')).to_have_count(1)
        ledger.get_by_test_id("ns-delete").click()
        page.get_by_test_id("confirm-ok").click()
        expect(ledger).to_have_count(0)
        assert s.api("GET", "/namespaces/ledger", token=TOKEN)[0] == 404


def _sign_in_here(page: Page, secret: str) -> None:
    """Sign in on the sign-in screen the page shows now (no reload: the tab keeps what it holds)."""
    page.get_by_test_id("f-token").fill(secret)
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("login-form")).to_have_count(0)


def _revocable(k: Keys) -> tuple[str, str]:
    """A writer key of namespace pay made for one test: (its id, its secret)."""
    made = k.call("POST", "/keys", {"name": "soon-revoked", "role": "writer", "namespaces": ["pay"]})
    return made["id"], made["secret"]


def test_a_refused_key_is_forgotten_and_never_sent_again_so_the_next_sign_in_is_not_braked(
    tmp_path: Path, page: Page
) -> None:
    """The node counts each refused key against the client's address (ten, then one a second; the
    address's other requests are answered 429, a good key's too). A console that went on sending a
    revoked key with its heartbeat every second braked its own user within ten seconds."""
    with serve_ui(tmp_path / "revoked", token=TOKEN) as s:
        k = seed(s)
        kid, secret = _revocable(k)
        with_key: list[str] = []
        beats: list[str] = []  # the heartbeat's questions, with the key each carried
        page.on("request", lambda r: with_key.append(r.url)
                if r.headers.get("authorization") == f"Bearer {secret}" else None)
        page.on("request", lambda r: beats.append(r.headers.get("authorization", ""))
                if r.url.endswith("/api/v1/cluster/leader") else None)
        sign_in(page, k, secret)
        expect(page.locator("tr[data-task-id]")).to_have_count(1)
        assert with_key, "the console sends the signed-in key"
        k.call("DELETE", f"/keys/{kid}")
        expect(page.get_by_test_id("login-form")).to_be_visible()  # the heartbeat's 401
        refused = len(with_key)
        for _ in range(30):  # three heartbeats' time: none may carry the refused key
            page.wait_for_timeout(100)
            assert len(with_key) == refused, f"the refused key was sent again: {with_key[refused:]}"
        assert page.evaluate("sessionStorage.getItem('molens.token')") is None
        expect(page.get_by_test_id("who")).to_have_count(0)  # the header names nobody
        _sign_in_here(page, k.secrets["wes-writer"])
        expect(page.get_by_test_id("who")).to_contain_text("wes-writer")
        expect(page.locator("tr[data-task-id]")).to_have_count(1)
        assert len(with_key) == refused
        good = f"Bearer {k.secrets['wes-writer']}"
        for _ in range(60):  # the heartbeat goes on with the new key
            if beats.count(good) >= 2:
                break
            page.wait_for_timeout(100)
        assert beats.count(good) >= 2, beats


def test_a_task_form_being_typed_when_the_key_is_refused_comes_back_after_signing_in(
    tmp_path: Path, page: Page
) -> None:
    """The sign-in screen of a 401 replaces the page; what was typed in the task form is back once
    signed in again (a sign-out, though, forgets it)."""
    with serve_ui(tmp_path / "form", token=TOKEN) as s:
        k = seed(s)
        kid, secret = _revocable(k)
        sign_in(page, k, secret, path="/ui/tasks/new")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        page.get_by_test_id("f-scene").fill("typed-before-401")
        page.get_by_test_id("f-payload").fill('{"half": "typed"}')
        k.call("DELETE", f"/keys/{kid}")
        expect(page.get_by_test_id("login-form")).to_be_visible()
        _sign_in_here(page, k.secrets["wes-writer"])
        expect(page.get_by_test_id("draft-restored")).to_be_visible()
        expect(page.get_by_test_id("f-scene")).to_have_value("typed-before-401")
        expect(page.get_by_test_id("f-payload")).to_have_value('{"half": "typed"}')
        page.get_by_test_id("submit").click()
        page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
        task = k.call("GET", "/tasks/" + page.url.rsplit("/", 1)[-1])
        assert (task["scene"], task["payload"], task["namespace"]) == ("typed-before-401", {"half": "typed"}, "pay")

        page.goto(s.url + "/ui/tasks/new")
        page.get_by_test_id("f-scene").fill("typed-before-sign-out")
        page.get_by_test_id("sign-out").click()
        _sign_in_here(page, k.secrets["wes-writer"])
        expect(page.get_by_test_id("task-form")).to_be_visible()
        expect(page.get_by_test_id("f-scene")).to_have_value("")
        expect(page.get_by_test_id("draft-restored")).to_have_count(0)


def test_a_first_whoami_that_failed_is_asked_again_until_the_console_knows_the_key(
    tmp_path: Path, page: Page, console: Console
) -> None:
    """Until /whoami answers the console offers no change (it does not know what the key may do);
    one failed answer at the start must not leave it read-only until a reload."""
    console.allow.append(r"status of 503")
    with serve_ui(tmp_path / "open") as s:
        asked: list[int] = []

        def first_fails(route: Route) -> None:
            asked.append(1)
            if len(asked) == 1:
                route.fulfill(status=503, content_type="application/json",
                              body='{"error": {"code": "unavailable", "message": "try again"}}')
            else:
                route.continue_()

        page.route("**/api/v1/whoami", first_fails)
        page.goto(s.url + "/ui/tasks")
        expect(page.get_by_test_id("tasks-table")).to_be_visible()
        expect(page.get_by_test_id("who")).to_contain_text("open node")
        expect(page.get_by_test_id("new-task")).to_be_visible()
        assert len(asked) >= 2
