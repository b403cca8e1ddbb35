"""The web dashboard's endpoints (docs/adr/0023) on both engines, through Starlette's
TestClient: every page reads what the store holds; without a token every action is
refused and no page offers one; with it, a signed-in browser acts only with its CSRF
token and from its own origin, bulk operations confirm their count first, and every
action is logged with who, what and how many."""

from __future__ import annotations

import logging
import re

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")
from starlette.testclient import TestClient

import alkstore
from relay.dashboard import LOOPBACK_HOSTS, create_app
from tests.events import OrderPlaced

TOKEN = "s3cret-token"
POSTS = [
    "/queues/mail/pause",
    "/queues/mail/resume",
    "/queues/mail/dead/requeue",
    "/queues/mail/dead/purge",
    "/jobs/1/retry",
    "/jobs/1/cancel",
    "/schedules/nightly/pause",
    "/schedules/nightly/resume",
    "/schedules/nightly/run",
    "/logout",
]


@pytest.fixture
def filled(store: alkstore.Store) -> alkstore.Store:
    store.subscribe("orders", ["test.*"], start="beginning")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=7, total_cents=990), key="order-7")
    store.relay_batch()
    mail = store.queue("mail")
    mail.enqueue_many([{"to": f"u{i}@example.com"} for i in range(60)])
    for reason in ("smtp timeout", "smtp timeout", "bad address <x>"):
        mail.enqueue({"to": "dead@example.com"}, max_attempts=1, priority=9)
        job = mail.claim()
        assert job is not None
        job.fail(reason)
    store.schedules.add("nightly", cron="0 3 * * *", event=OrderPlaced(order_id=0, total_cents=0))
    return store


def _client(store: alkstore.Store, token: str | None = None) -> TestClient:
    return TestClient(create_app(store, token=token), follow_redirects=False)


def _csrf(html: str) -> str:
    found = re.search(r'name=csrf value="([0-9a-f]{64})"', html)
    assert found, "no CSRF token on the page"
    return found[1]


def _signed_in(store: alkstore.Store) -> tuple[TestClient, str]:
    client = _client(store, TOKEN)
    assert client.post("/login", data={"token": TOKEN}).status_code == 303
    return client, _csrf(client.get("/queues").text)


def test_every_page_shows_what_the_store_holds(filled: alkstore.Store) -> None:
    client = _client(filled)
    overview = client.get("/")
    assert overview.status_code == 200
    assert 'hx-trigger="every 2s"' in overview.text and "/static/htmx.min.js" in overview.text
    assert re.search(r">mail</a>.*?<td class=n>60</td>", overview.text)  # ready
    assert ">orders<" in overview.text and "caught up" in overview.text  # relay lag
    assert ">relay<" in overview.text and ">sweeper<" in overview.text  # leaders
    queues = client.get("/queues").text
    assert re.search(r">mail</a>.*?<td class=n>60</td>.*?<td class=n>0</td>.*?3</a>", queues)
    page = client.get("/queues/mail").text
    assert page.count('<a href="/jobs/') == 50 and "next 50" in page
    first = [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', page)]
    after = re.search(r'href="(/queues/mail\?after=\d+)"', page)
    assert after and after[1] == f"/queues/mail?after={first[-1]}"
    second = [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', client.get(after[1]).text)]
    assert len(second) == 10 and second[0] > first[-1]
    ready = client.get("/queues/mail?state=scheduled").text
    assert '<a href="/jobs/' not in ready
    job = client.get(f"/jobs/{first[0]}").text
    assert "u0@example.com" in job and "ready" in job
    everywhere = client.get("/dead").text
    assert re.search(r'href="/queues/mail/dead">mail</a>.*?<td class=n>3</td>', everywhere)
    assert ">orders<" not in everywhere  # a queue without dead letters
    dead = client.get("/queues/mail/dead").text
    assert dead.count("smtp timeout") == 2 and "bad address &lt;x&gt;" in dead  # escaped
    dead_id = int(re.findall(r'<a href="/jobs/(\d+)">', dead)[0])
    letter = client.get(f"/jobs/{dead_id}").text
    assert "dead@example.com" in letter and "smtp timeout" in letter
    filtered = client.get("/queues/mail/dead?error=bad").text
    assert "smtp timeout" not in filtered and "bad address" in filtered
    assert "nightly" in client.get("/schedules").text
    log = client.get("/log?type=test.*&key=order-7").text
    assert "test.order_placed" in log and "990" in log
    assert "test.order_placed" not in client.get("/log?key=nope").text.split("</form>")[1]
    assert client.get("/static/htmx.min.js").text.startswith("var htmx")
    assert client.get("/login").status_code == 200


def test_errors_are_pages_with_their_status(filled: alkstore.Store) -> None:
    client = _client(filled)
    assert client.get("/jobs/999999").status_code == 404
    assert client.get("/queues/mail?state=nonsense").status_code == 400
    assert client.get("/queues/mail?after=x").status_code == 400
    assert client.get("/queues/mail/dead?error=(").status_code == 400
    assert client.get("/queues/mail/dead?since=yesterday").status_code == 400
    assert client.get("/static/other.js").status_code == 404


@pytest.mark.parametrize("token", [None, TOKEN])
def test_without_signing_in_nothing_is_offered_and_every_action_refused(
    filled: alkstore.Store, token: str | None
) -> None:
    client = _client(filled, token)
    for path in ("/", "/queues", "/queues/mail", "/queues/mail/dead", "/jobs/1", "/schedules"):
        assert "method=post" not in client.get(path).text, path
    for path in POSTS:
        assert client.post(path, data={"ids": "1", "confirm": "1"}).status_code == 403, path
    assert client.post("/login", data={"token": "wrong"}).status_code == 403
    assert (
        client.post("/queues/mail/pause", headers={"authorization": "Bearer no"}).status_code == 403
    )
    mail = filled.queue("mail")
    assert not mail.info().paused and mail.count_dead() == 3


def test_a_signed_in_browser_acts_with_its_csrf_token_only(
    filled: alkstore.Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "alkstore.dashboard")
    client, csrf = _signed_in(filled)
    mail = filled.queue("mail")
    assert 'action="/queues/mail/pause"' in client.get("/").text
    assert client.post("/queues/mail/pause").status_code == 403  # no CSRF token
    assert client.post("/queues/mail/pause", data={"csrf": "0" * 64}).status_code == 403
    evil = {"origin": "http://evil.example"}
    assert client.post("/queues/mail/pause", data={"csrf": csrf}, headers=evil).status_code == 403
    assert not mail.info().paused
    done = client.post("/queues/mail/pause", data={"csrf": csrf})
    assert done.status_code == 303 and mail.info().paused
    back = client.get(done.headers["location"]).text
    assert "pause: 1 (mail)" in back and 'hx-get="/queues/mail"' in back  # the note is not polled
    client.post("/queues/mail/resume", headers={"x-csrf-token": csrf})
    assert not mail.info().paused
    assert client.post("/queues/mail/explode", data={"csrf": csrf}).status_code == 404

    (first, *_) = mail.jobs(limit=1)
    assert client.post(f"/jobs/{first.id}/cancel", data={"csrf": csrf}).status_code == 303
    assert filled.job(first.id) is None
    later = mail.enqueue({"to": "later"}, delay=3600)
    assert client.post(f"/jobs/{later}/retry", data={"csrf": csrf}).status_code == 303
    found = filled.job(later)
    assert found is not None and found.state == "ready"

    timeouts = [d.id for d in mail.dead_letters(error="timeout")]
    ask = client.post("/queues/mail/dead/requeue", data={"csrf": csrf, "ids": timeouts})
    assert ask.status_code == 200 and "Requeue <b>2</b> dead letters of <b>mail</b>" in ask.text
    assert mail.count_dead() == 3  # nothing until confirmed
    sure = client.post(
        "/queues/mail/dead/requeue", data={"csrf": _csrf(ask.text), "ids": timeouts, "confirm": "1"}
    )
    assert sure.status_code == 303 and mail.count_dead() == 1
    ask = client.post("/queues/mail/dead/purge", data={"csrf": csrf, "all": "1", "error": "bad"})
    assert "Purge <b>1</b> dead letter of <b>mail</b>" in ask.text
    fields = {"csrf": csrf, "all": "1", "error": "bad", "confirm": "1"}
    assert client.post("/queues/mail/dead/purge", data=fields).status_code == 303
    assert mail.count_dead() == 0

    assert client.post("/schedules/nightly/pause", data={"csrf": csrf}).status_code == 303
    assert filled.schedules.get("nightly").paused
    client.post("/schedules/nightly/resume", data={"csrf": csrf})
    assert not filled.schedules.get("nightly").paused
    head = filled.log.head()
    assert client.post("/schedules/nightly/run", data={"csrf": csrf}).status_code == 303
    (fired,) = filled.log.read(after=head)
    assert fired.headers["alkstore-schedule"] == "nightly"

    actions = [r.alkstore for r in caplog.records if hasattr(r, "alkstore")]
    assert {"action": "requeue", "queue": "mail", "count": 2} in [
        {k: a[k] for k in ("action", "queue", "count")} for a in actions if "queue" in a
    ]
    assert {"action": "run", "schedule": "nightly", "count": 1} in [
        {k: a[k] for k in ("action", "schedule", "count")} for a in actions if "schedule" in a
    ]
    assert all("session" in a["who"] for a in actions)
    assert client.post("/logout", data={"csrf": csrf}).status_code == 303


def test_a_bearer_token_acts_without_a_session(filled: alkstore.Store) -> None:
    client = _client(filled, TOKEN)
    auth = {"authorization": f"Bearer {TOKEN}"}
    mail = filled.queue("mail")
    fields = {"all": "1", "confirm": "1"}
    done = client.post("/queues/mail/dead/requeue", data=fields, headers=auth)
    assert done.status_code == 303 and mail.count_dead() == 0
    assert mail.info().ready == 63


def test_on_loopback_only_loopback_host_names_are_answered(filled: alkstore.Store) -> None:
    app = create_app(filled, allowed_hosts=LOOPBACK_HOSTS)
    assert TestClient(app, base_url="http://127.0.0.1:8080").get("/").status_code == 200
    assert TestClient(app, base_url="http://localhost:8080").get("/").status_code == 200
    rebound = TestClient(app, base_url="http://evil.example:8080")  # DNS rebinding
    assert rebound.get("/").status_code == 400


def test_the_log_pages_back_a_window_at_a_time(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.dashboard import _pages

    monkeypatch.setattr(_pages, "LOG_WINDOW", 80)
    with store.transaction() as tx:
        for i in range(1, 121):
            tx.append(OrderPlaced(order_id=i, total_cents=i), key=f"order-{i}")
    client = _client(store)

    def shown(path: str) -> tuple[list[int], str | None]:
        page = client.get(path).text
        positions = [int(p) for p in re.findall(r"<tr><td class=n>(\d+)</td>", page)]
        older = re.search(r'href="(/log[^"]*)">older', page)
        return positions, None if older is None else older[1].replace("&amp;", "&")

    first, older = shown("/log")
    assert first == list(range(120, 70, -1)) and older == "/log?before=70"
    second, older = shown(older)
    assert second == list(range(70, 20, -1)) and older == "/log?before=20"
    third, older = shown(older)
    assert third == list(range(20, 0, -1)) and older is None
    found, older = shown("/log?key=order-3")  # not among the newest 80: none, then older
    assert found == [] and older == "/log?key=order-3&before=40"
    assert shown(older) == ([3], None)
