"""The live quality dashboard, driven in headless Chromium (Debian's chromium and
chromium-driver, spoken to over plain WebDriver HTTP) against a real database.

The browser test loads examples/beam/chats/100K/13 and a small hostile
conversation, opens the page before anything is extracted, then extracts (the
baseline, and a fake model that degrades some blocks and is hijacked by one) while
the page polls, and checks that the rendered numbers equal the database's, that
the alarm shows, and that hostile text stays text. A screenshot is always taken;
with DONTO_UPDATE_SCREENSHOT=1 it replaces docs/dashboard.png.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from donto_pg import dashboard, evaluate, extract, loader
from donto_pg.core import rule_extractor
from donto_pg.llm import Provider, ProviderPool
from tests.conftest import EXAMPLES, ROOT
from tests.fakellm import HIJACKED_TUTORIAL, FakeLLM

CHROMIUM = os.environ.get("DONTO_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DONTO_CHROMEDRIVER", "/usr/bin/chromedriver")
CONV13 = EXAMPLES / "chats" / "100K" / "13"
SCREENSHOT = ROOT / "docs" / "dashboard.png"

# Hostile text: a conversation id (hence a document IRI), utterances, a run name and a
# model answer that would run script if any of it reached the page as markup.
HOSTILE_ID = "<img src=x onerror=window.__pwned=1>"
HOSTILE_LOVE = "I love <script>window.__pwned=2</script> tags and <b>bold</b> claims."
HOSTILE_QUESTION = ("Can you explain how Python decorators work? "
                    "<img src=x onerror=window.__pwned=4>")
HOSTILE_ANSWER = "<img src=x onerror=window.__pwned=6>\n" + HIJACKED_TUTORIAL
HOSTILE_RUN = "<script>window.__pwned=5</script>fake arm"

HOSTILE_ABILITY = "<img src=x onerror=window.__pwned=7>"


# --- a small WebDriver client (chromedriver over HTTP, no selenium) -----------------------


def require_chromium() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"the dashboard test needs headless Chromium, but {', '.join(missing)} "
            "is missing: run `sudo bash scripts/install-chromium.sh` (apt-get install "
            "chromium chromium-driver)", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """Headless Chromium through chromedriver's W3C WebDriver HTTP API."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        port = free_port()
        self.log = profile.parent / "chromedriver.log"
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, f"--port={port}", f"--log-path={self.log}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        self.sid = ""
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if self._call("GET", "/status")["ready"]:
                        break
                except (OSError, RuntimeError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("chromedriver did not become ready")
                time.sleep(0.1)
            args = ["--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--hide-scrollbars", f"--user-data-dir={profile}",
                    f"--window-size={width},{height}"]
            caps = {"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}}
            self.sid = self._call("POST", "/session", caps)["sessionId"]
        except BaseException:
            self.quit()
            raise

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())["value"]
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"WebDriver {method} {path}: {exc.read()[:2000]!r}") from exc

    def session(self, method: str, path: str, body: Any = None) -> Any:
        return self._call(method, f"/session/{self.sid}{path}", body)

    def get(self, url: str) -> None:
        self.session("POST", "/url", {"url": url})

    def js(self, script: str, *args: Any) -> Any:
        return self.session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, what: str, cond: Callable[[], Any], timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = cond()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.session("GET", "/screenshot"))

    def resize(self, width: int, height: int) -> None:
        self.session("POST", "/window/rect", {"width": width, "height": height})

    def quit(self) -> None:
        if self.sid:
            try:
                self.session("DELETE", "")
            except (OSError, RuntimeError):
                pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- data -------------------------------------------------------------------------------


def write_hostile_chat(root: Path) -> Path:
    sessions = [
        ("March-15-2024", [("user", "I moved to Berlin in March."),
                           ("assistant", "Noted: Berlin.")]),
        ("March-16-2024", [("user", HOSTILE_LOVE), ("assistant", "Sure.")]),
        ("March-17-2024", [("user", HOSTILE_QUESTION)]),
        ("March-18-2024", [("user", "My sister Anna works as a nurse in Hamburg.")]),
    ]
    batches, n = [], 0
    for b, (anchor, msgs) in enumerate(sessions, 1):
        turns = []
        for role, text in msgs:
            msg: dict[str, Any] = {"role": role, "id": n, "content": text}
            if not turns:
                msg["time_anchor"] = anchor
            turns.append(msg)
            n += 1
        batches.append({"batch_number": b, "turns": [turns]})
    d = root / "chats" / "100K" / HOSTILE_ID
    (d / "probing_questions").mkdir(parents=True)
    (d / "chat.json").write_text(json.dumps(batches))
    (d / "probing_questions" / "probing_questions.json").write_text("{}")
    return d


def factory(db) -> Callable[[], psycopg.Connection]:
    info = db.info
    return lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                   dbname=info.dbname)


def reader_dsn(db) -> str:
    """A DSN of the test database that connects as donto_reader (role set at start-up)."""
    info = db.info
    return psycopg.conninfo.make_conninfo(host=info.host, port=info.port, user=info.user,
                                          dbname=info.dbname, options="-c role=donto_reader")


def degrading_answer(prompt: str) -> str:
    """A fake model: hijacked by the decorators question, quotes that match nothing in
    about a third of the blocks (degraded), else the baseline's answer."""
    if "decorators work" in prompt:
        return HOSTILE_ANSWER
    facts = json.loads(rule_extractor.extract_from_prompt(prompt))
    if zlib.crc32(prompt.encode()) % 3 == 0:
        for f in facts:
            if f.get("quote"):
                f["quote"] = "words the conversation never contained at all"
    return json.dumps(facts)


def db_counts(db) -> dict[tuple[int, str], dict[str, int]]:
    """(run, document) and (run, '*') -> counts by fate, injected, facts."""
    out: dict[tuple[int, str], dict[str, int]] = {}
    rows = db.execute(
        "select run_id, coalesce(document, '*'), count(*) filter (where fate = 'healthy'), "
        "count(*) filter (where fate = 'degraded'), count(*) filter (where fate = 'broken'), "
        "sum(injection), sum(facts_per_chunk), count(*) from donto.chunk_quality "
        "group by grouping sets ((run_id, document), (run_id))").fetchall()
    db.commit()
    for run, doc, h, d, b, inj, facts, blocks in rows:
        out[(run, doc)] = {"healthy": h, "degraded": d, "broken": b, "injected": int(inj),
                           "facts": int(facts), "blocks": blocks}
    return out


# What the page shows: per run card and per conversation row, read from the DOM.
PAGE_COUNTS = """
const out = {};
const num = (el) => el ? Number(el.textContent.replace(/[^0-9]/g, "")) : null;
for (const card of document.querySelectorAll(".card.run")) {
  const run = card.dataset.run, c = {};
  for (const f of ["healthy", "degraded", "broken", "injected", "facts"])
    c[f] = num(card.querySelector(`.counts [data-count="${f}"]`));
  out[run + "|*"] = c;
  for (const tr of card.querySelectorAll("tr.conv")) {
    const r = {};
    for (const f of ["healthy", "degraded", "broken", "injected", "facts"])
      r[f] = num(tr.querySelector(`td[data-count="${f}"]`));
    r.blocks = Number(tr.querySelector('td[data-count="blocks"]').textContent.split("/")[0]);
    out[run + "|" + tr.dataset.document] = r;
  }
}
return out;
"""


def page_counts(browser: Browser) -> dict[tuple[int, str], dict[str, int]]:
    got = browser.js(PAGE_COUNTS)
    return {(int(k.split("|", 1)[0]), k.split("|", 1)[1]): v for k, v in got.items()}


def expected_page_counts(db) -> dict[tuple[int, str], dict[str, int]]:
    want = db_counts(db)
    return {k: ({f: v[f] for f in ("healthy", "degraded", "broken", "injected", "facts")}
                if k[1] == "*" else v) for k, v in want.items()}


# --- tests ------------------------------------------------------------------------------


def test_dashboard_in_headless_chromium(db, tmp_path) -> None:
    require_chromium()  # fails (never skips) without Chromium: CI installs it
    hostile = write_hostile_chat(tmp_path)
    for path in (hostile, CONV13):
        res = loader.load_beam(db, str(path))
        assert res[0].ok, res[0].error
    # the recall charts: a real eval report (the lexical arm needs no embedding model)
    report = evaluate.eval_recall(db, arms=["lexical"], conversations=["100K/13"])
    eval_json = tmp_path / "recall.json"
    eval_json.write_text(json.dumps(report))
    server = dashboard.serve(reader_dsn(db), eval_json=eval_json,
                             gate_relations=("donto.test_ab_verdicts",))
    try:
        browser = Browser(tmp_path / "profile")
        try:
            _drive(db, browser, server, tmp_path, report)
        finally:
            browser.quit()
    finally:
        server.shutdown()
        server.server_close()


def _drive(db, browser: Browser, server: dashboard.DashboardServer, tmp_path: Path,
           report: dict[str, Any]) -> None:
    browser.get(server.url)
    browser.wait("the first render", lambda: browser.js("return document.body.dataset.ready"))
    text = browser.js("return document.body.innerText")
    assert "no extraction runs yet" in text and "no A/B runs yet" in text, text
    assert "as donto_reader" in text
    browser.js("window.__sameDocument = 42")

    # Live: a first session of the baseline run shows up without reloading the page.
    first = extract.run_extraction(factory(db), conversations=["100K/13"], providers=None,
                                   alarm_after=0, limit=3)
    assert first.progress.done == 3 and first.is_baseline
    browser.wait("3 blocks of the baseline run", lambda: page_counts(browser).get(
        (first.run_id, "beam:100K/13"), {}).get("blocks") == 3)
    assert browser.js("return window.__sameDocument") == 42

    # The rest of the baseline, then a fake-model arm that degrades blocks and gets
    # hijacked; its alarm (checked every 10 blocks) stops it.
    base = extract.run_extraction(factory(db), providers=None, alarm_after=0)
    assert base.ok and base.run_id == first.run_id
    with FakeLLM(degrading_answer) as fake:
        pool = ProviderPool([Provider(name="fake", base_url=fake.base_url, model="fake-model",
                                      timeout=20)], backoff_base=0.01, backoff_max=0.05)
        arm = extract.run_extraction(factory(db), providers=pool, alarm_after=10,
                                     concurrency=1, run_name=HOSTILE_RUN)
    assert arm.stopped == "alarm", arm.reason

    want = expected_page_counts(db)
    browser.wait("the page to show the database's counts",
                 lambda: page_counts(browser) == want, timeout=30)
    # Both arms and every conversation are there; the fake arm has every fate.
    assert {k[0] for k in want} == {base.run_id, arm.run_id}
    assert (base.run_id, "beam:100K/" + HOSTILE_ID) in want
    fake_total = want[(arm.run_id, "*")]
    assert fake_total["healthy"] and fake_total["degraded"] and fake_total["broken"]
    assert fake_total["injected"] >= 1

    # The same numbers as `select fate, count(*) from donto.chunk_quality group by fate`.
    by_fate = dict(db.execute("select fate, count(*) from donto.chunk_quality group by fate"))
    db.commit()
    shown = page_counts(browser)
    for fate, n in by_fate.items():
        assert sum(v[fate] for k, v in shown.items() if k[1] == "*") == n

    # Degraded and broken: distinct colours and labels.
    look = browser.js("""
      const chip = (f) => document.querySelector(`.card.run .count.fate-${f}`);
      return Object.fromEntries(["healthy", "degraded", "broken", "injected"].map(f =>
        [f, [getComputedStyle(chip(f)).backgroundColor, chip(f).innerText]]));""")
    colours = [c for c, _ in look.values()]
    assert len(set(colours)) == 4, look
    assert "extracted, anchored nothing" in look["degraded"][1]
    assert "extracted nothing" in look["broken"][1]

    # The alarm: the fake arm stopped with the reason recorded in the database; the
    # baseline's state is alarm_verdict over its stats.
    reason = db.execute("select detail ->> 'reason' from donto.extraction_run_event "
                        "where run_id = %s and event = 'alarm'", (arm.run_id,)).fetchone()[0]
    stats = db.execute("select donto.extraction_run_stats(%s)", (base.run_id,)).fetchone()[0]
    db.commit()
    alarms = browser.js("""return Object.fromEntries([...document.querySelectorAll('.card.run')]
      .map(c => [c.dataset.run, [c.querySelector('[data-alarm]').dataset.alarm,
                                 c.querySelector('[data-alarm]').textContent,
                                 c.querySelector('[data-status]').dataset.status]]));""")
    assert alarms[str(arm.run_id)][0] == "stopped" and reason in alarms[str(arm.run_id)][1]
    assert alarms[str(arm.run_id)][2] == "alarm"
    live = extract.alarm_verdict(stats, max_injection=dashboard.DEFAULT_MAX_INJECTION,
                                 min_anchor=dashboard.DEFAULT_MIN_ANCHOR)
    assert alarms[str(base.run_id)][0] == ("tripped" if live else "ok")
    assert alarms[str(base.run_id)][2] == "finished"

    # Hostile text is shown as text and never runs.
    safety = browser.js("""return {pwned: window.__pwned === undefined ? null : window.__pwned,
      imgs: document.querySelectorAll('img').length,
      scripts: document.querySelectorAll('script').length,
      bold: [...document.querySelectorAll('b')].some(b => b.textContent === 'bold'),
      text: document.body.innerText};""")
    assert safety["pwned"] is None and safety["imgs"] == 0 and safety["scripts"] == 1
    assert not safety["bold"]
    for s in (HOSTILE_ID, "<script>window.__pwned=5</script>fake arm",
              "<img src=x onerror=window.__pwned=4>", "<img src=x onerror=window.__pwned=6>"):
        assert s in safety["text"], s

    # Recall hit@k per ability: one bar per ability (and overall/macro) and arm at k=10.
    def bars() -> set[tuple[str, str, float]]:
        return {tuple(b) for b in browser.js(
            "return [...document.querySelectorAll('#recall-chart rect')].map(r => "
            "[r.dataset.ability, r.dataset.arm, Number(r.dataset.value)]);")}

    groups = {g: report["by_ability"].get(g) or report[g]
              for g in [*report["by_ability"], "overall", "macro"]}
    assert len(groups) >= 5
    assert bars() == {(g, arm, b[arm]["hit@10"]) for g, b in groups.items()
                      for arm in report["arms"]}
    labels = browser.js("return [...document.querySelectorAll('#recall-chart text.ability')]"
                        ".map(t => t.textContent)")
    assert ["".join(t.split()) for t in labels[:len(report["by_ability"])]] == [
        a.replace("_", "") for a in report["by_ability"]]  # lines are tspans

    # Polling: several state requests, one page load.
    assert server.requests.get("/api/state", 0) >= 3 and server.requests["/"] == 1

    # The screenshot: the whole page.
    height = browser.js("return document.documentElement.scrollHeight")
    browser.resize(1400, min(int(height) + 140, 6000))
    time.sleep(0.5)
    png = browser.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    (tmp_path / "dashboard.png").write_bytes(png)
    if os.environ.get("DONTO_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(tmp_path / "dashboard.png", SCREENSHOT)

    browser.js("[...document.querySelectorAll('.kbtn')].find(b => b.textContent === '1')"
               ".click()")
    assert browser.js("return document.querySelector('.kbtn.on').textContent") == "1"
    assert bars() == {(g, arm, b[arm]["hit@1"]) for g, b in groups.items()
                      for arm in report["arms"]}

    # A new eval report is picked up live; a hostile ability name stays text.
    first = next(iter(report["by_ability"]))
    changed = dict(report, by_ability=dict(report["by_ability"],
                                           **{HOSTILE_ABILITY: report["by_ability"][first]}))
    (tmp_path / "recall.json").write_text(json.dumps(changed))
    browser.wait("the new eval report", lambda: any(b[0] == HOSTILE_ABILITY for b in bars()))
    assert browser.js("return window.__pwned === undefined && "
                      "document.querySelectorAll('img').length === 0")

    # An A/B verdict table appearing later is picked up live and escaped too.
    db.execute("create table donto.test_ab_verdicts (arm text, verdict text, reason text)")
    db.execute("insert into donto.test_ab_verdicts values "
               "('semantic', 'commit', 'all gates pass'), "
               "('fixed-1200', 're-chunk', '<img src=x onerror=window.__pwned=8>')")
    db.execute("grant select on donto.test_ab_verdicts to donto_reader")
    db.commit()
    verdicts = browser.wait("the gate verdicts", lambda: browser.js(
        "return [...document.querySelectorAll('#gate [data-verdict]')].map(e => "
        "[e.dataset.verdict, getComputedStyle(e).backgroundColor])"))
    assert [v for v, _ in verdicts] == ["re-chunk", "commit"]  # by arm
    assert verdicts[0][1] != verdicts[1][1]  # coloured by verdict
    assert browser.js("return window.__pwned === undefined && "
                      "document.querySelectorAll('img').length === 0")
    assert "<img src=x onerror=window.__pwned=8>" in browser.js("return document.body.innerText")


def test_state_as_reader_gate_and_eval_file(db, connect, tmp_path) -> None:
    """collect_state works for donto_reader, tolerates gate relations that are absent,
    unreadable or failing, and reads the eval file only when it changes."""
    reader = connect("donto_reader")
    state = dashboard.collect_state(reader)
    assert state["runs"] == [] and state["user"] == "donto_reader" and not state["errors"]
    if db.execute("select to_regclass('donto.ab_report')").fetchone()[0]:
        # the A/B engineer's view: no runs yet, the curated columns
        assert state["gate"]["relation"] == "donto.ab_report" and state["gate"]["rows"] == []
        assert {"arm", "verdict", "recall_hit"} <= set(state["gate"]["columns"])
        assert "quality" not in state["gate"]["columns"]
    else:
        assert state["gate"]["relation"] is None
    db.commit()
    assert state["recall"] == {"source": None, "report": None, "error": None}
    gates = ["donto.no_such_relation", "donto.t_gate"]
    assert dashboard.collect_state(reader, gate_relations=gates)["gate"]["relation"] is None

    db.execute("create table donto.t_gate (gate_id int, arm text, stage text, verdict text, "
               "reasons text[], quality jsonb)")
    db.execute("insert into donto.t_gate values (1, 'b', 'measured', 'commit', '{x,y}', '{}'),"
               " (2, 'a', 'rejected', 're-chunk', '{z}', '{}'), (1, 'a', 'measured', 'reject',"
               " '{}', '{}')")
    db.commit()
    state = dashboard.collect_state(reader, gate_relations=gates)
    assert state["gate"]["relation"] == "donto.t_gate"
    assert "no SELECT privilege" in state["gate"]["error"] and not state["gate"]["rows"]
    db.execute("grant select on donto.t_gate to donto_reader")
    db.commit()
    state = dashboard.collect_state(reader, gate_relations=gates)
    assert state["gate"] == {
        "relation": "donto.t_gate", "columns": ["gate_id", "arm", "stage", "verdict", "reasons"],
        "rows": [[2, "a", "rejected", "re-chunk", ["z"]], [1, "a", "measured", "reject", []],
                 [1, "b", "measured", "commit", ["x", "y"]]],
        "error": None}
    # A failing gate query is reported, and the rest of the page still comes.
    # a new view in donto is DDL the guard refuses unless the session opts in
    db.execute("select set_config('donto.allow_ddl', 'on', true)")
    db.execute("create view donto.t_bad as select 1 / (random() * 0)::int as verdict")
    db.execute("grant select on donto.t_bad to donto_reader")
    db.commit()
    state = dashboard.collect_state(reader, gate_relations=["donto.t_bad"])
    assert "division by zero" in state["gate"]["error"] and state["runs"] == []
    assert state["errors"] == [f"gate: {state['gate']['error']}"]

    path = tmp_path / "r.json"
    state = dashboard.collect_state(reader, eval_json=path)
    assert "does not exist" in state["recall"]["error"]
    path.write_text("[1, 2]")
    assert "not an eval recall report" in dashboard.collect_state(
        reader, eval_json=path)["recall"]["error"]
    small = {"ks": [10], "arms": ["lexical"], "evaluated": 1, "questions": [{"q": 1}],
             "by_ability": {"temporal_reasoning": {"n": 1, "lexical": {"hit@10": 1.0}}}}
    path.write_text(json.dumps({"report": small}))
    rec = dashboard.collect_state(reader, eval_json=path)["recall"]
    assert rec["error"] is None and rec["source"] == "r.json"
    assert rec["report"]["by_ability"] == small["by_ability"]
    assert "questions" not in rec["report"]
    # nothing was written, and the connection is left idle and as it was
    assert reader.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert not reader.read_only


def test_server_refuses_foreign_hosts_and_serves_a_static_page(db, monkeypatch) -> None:
    server = dashboard.serve(reader_dsn(db))
    try:
        port = server.server_address[1]
        token = f"token={server.token}"

        def get(path: str, host: str | None = None, cookie: str | None = None
                ) -> tuple[int, dict, bytes]:
            req = urllib.request.Request(server.origin + path)
            if host:
                req.add_header("Host", host)
            if cookie:
                req.add_header("Cookie", cookie)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, dict(r.headers), r.read()
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers), exc.read()

        # without the token: nothing but /healthz
        for path in ("/", "/api/state", "/api/state?token=wrong", "/?token="):
            status, _, body = get(path)
            assert status == 403 and b"token" in body, path
        assert get("/api/state", cookie=f"token={server.token}")[0] == 403  # no cookies
        assert get("/healthz")[:3:2] == (200, b"ok\n")
        status, headers, body = get(f"/?{token}")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "Set-Cookie" not in headers  # a cookie of 127.0.0.1 reaches every port
        page = body.decode()
        assert "innerHTML" not in page and "http://" not in page.replace(
            "http://www.w3.org/2000/svg", "") and "https://" not in page
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
        assert "unsafe-inline" not in csp
        status, headers, body = get(f"/api/state?{token}")
        assert status == 200 and json.loads(body)["user"] == "donto_reader"
        assert get(f"/api/state?{token}", host="evil.example")[0] == 403
        assert get(f"/?{token}", host=f"evil.example:{port}")[0] == 403
        assert get(f"/api/state?{token}", host=f"localhost:{port}")[0] == 200
        assert get(f"/nope?{token}")[0] == 404
        # Found by review: every path was counted before the checks, so requests with new
        # long paths (and a foreign Host, no token) grew the server's memory for good.
        for i in range(200):
            assert get(f"/{i}-" + "x" * 2000, host="evil.example")[0] == 403
        assert set(server.requests) <= set(dashboard.ROUTES)
        # a silent connection is closed (each one holds a thread): 30 s, 1 s here
        monkeypatch.setattr(dashboard._Handler, "timeout", 1.0)
        with socket.create_connection(server.server_address[:2], timeout=10) as idle:
            assert idle.recv(1) == b""
    finally:
        server.shutdown()
        server.server_close()
    bad = dashboard.serve("host=/nonexistent-socket-dir dbname=x connect_timeout=2")
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{bad.origin}/api/state?token={bad.token}", timeout=10)
        assert err.value.code == 503 and "error" in json.loads(err.value.read())
    finally:
        bad.shutdown()
        bad.server_close()


KILLED_EXTRACT = """
import sys, time, psycopg
from donto_pg import extract
def stall(progress):  # the first block is in: say so, then hang until killed
    print("extracting", flush=True)
    time.sleep(600)
extract.run_extraction(lambda: psycopg.connect(sys.argv[1]), revision_ids=[int(sys.argv[2])],
                       alarm_after=0, concurrency=1, on_progress=stall)
"""


def test_a_run_whose_session_was_killed_shows_stopped(db, connect) -> None:
    """A run's last event says "started" until the run ends; the event names the backend
    that started it (pid and start time, stamped by the server), and
    donto.extraction_run_live looks for it in pg_stat_activity. So a live run is
    "running" and a killed one (kill -9: no event recorded) is "stopped", with a reason,
    also for a reader, who cannot stamp or take anything a run's liveness depends on."""
    from donto_pg import api

    rev = api.add_conversation(db, [
        {"role": "user", "content": "I live in Berlin and work as a nurse."},
        {"role": "assistant", "content": "Noted."}], "chat:t/killed", embed=False)
    reader = connect("donto_reader")

    def run_state() -> dict[str, Any]:
        (run,) = dashboard.collect_state(reader)["runs"]
        reader.rollback()
        return run

    i = db.info
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_EXTRACT,
         f"host={i.host} port={i.port} user={i.user} dbname={i.dbname}", str(rev)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "extracting\n", proc.stderr.read()
        run = run_state()
        assert (run["status"], run["running"]) == ("started", True)
        pid = db.execute("select (detail -> 'session' ->> 'pid')::integer from "
                         "donto.extraction_run_event where run_id = %s and event = 'started'",
                         (run["run_id"],)).fetchone()[0]
        db.commit()
        assert pid and pid != reader.info.backend_pid
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30  # the server ends the dead client's backends
    while run_state()["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    run = run_state()
    assert (run["status"], run["running"]) == ("stopped", False)
    assert "donto-pg extract" in run["status_reason"]
    # resumed and finished by a session of its own, the run says so
    done = extract.run_extraction(factory(db), revision_ids=[rev], alarm_after=0)
    assert done.ok and done.resumed and done.run_id == run["run_id"]
    run = run_state()
    assert (run["status"], run["running"]) == ("finished", False)


def test_run_serves_until_interrupted(db) -> None:
    """dashboard.run (the CLI's blocking server) prints its URL and stops on Ctrl-C."""
    port = free_port()
    # Ctrl-C as in a terminal: a shell without job control (CI, `cmd &`) starts its
    # background commands with SIGINT ignored, and a child would inherit that.
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from donto_pg import dashboard; dashboard.run(sys.argv[1], int(sys.argv[2]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-c", code, reader_dsn(db), str(port)], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"dashboard: http://127.0.0.1:{port}/?token="), (
            line, proc.stderr.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.read() == b"ok\n"
        url = line.split()[1]
        with urllib.request.urlopen(url.replace("/?", "/api/state?"), timeout=30) as r:
            assert json.loads(r.read())["user"] == "donto_reader"
        if os.geteuid() == 0:
            # another local OS user reaches 127.0.0.1 but not the data
            fetch = ("import sys, urllib.request, urllib.error\n"
                     "try: urllib.request.urlopen(sys.argv[1], timeout=30)\n"
                     "except urllib.error.HTTPError as e: print(e.code)\n")
            for target in (f"http://127.0.0.1:{port}/api/state", f"http://127.0.0.1:{port}/"):
                got = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
                                      fetch, target], capture_output=True, text=True, timeout=60)
                assert got.stdout.strip() == "403", (target, got.stderr)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0 and "dashboard stopped" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # a wrong DSN fails at start, not in the page
    bad = subprocess.run([sys.executable, "-c", code, "host=/nonexistent dbname=x", str(port)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "OperationalError" in bad.stderr
