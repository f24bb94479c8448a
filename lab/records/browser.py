"""report.html looked at as a person would: in a real headless Chromium, offline, from file://.

`inspect(report)` opens the page in Debian's `chromium` (driven over the DevTools protocol with
websocket-client), with the network switched off, and returns what a reader would notice: where the summary
sits (above the fold or not), whether the charts drew (plotly SVG present), console errors, whether the page
is wider than the window (a table pushing it sideways), what is cut at the right edge (past the window with no scroll
box around it, or a command block whose end is out of sight), a code token wrapped inside ("-DGGML_CUDA=ON" at its
"-"), contents items drawn over each other, the page height, any request that tried to leave file://; it also saves
a screenshot of the first screen. `lab run` keeps that screenshot and the findings in
the run folder (report.png, report-check.json) when Chromium is installed.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lab.core import evidence, processes

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio")
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")

# Runs in the page after it loaded: the facts the checks below judge.
PROBE = """(() => {
  const a = document.getElementById('answer');
  const r = a ? a.getBoundingClientRect() : null;
  const plots = document.querySelectorAll('.plotly-graph-div');
  // what a reader sees: not inside a closed <details>, not display:none
  const shown = e => e.checkVisibility ? e.checkVisibility() : e.offsetParent !== null;
  return {
    inner_width: window.innerWidth, inner_height: window.innerHeight,
    scroll_width: document.documentElement.scrollWidth, page_height: document.documentElement.scrollHeight,
    answer_top: r ? r.top : null, answer_height: r ? r.height : null,
    answer_text: a ? a.innerText.slice(0, 400) : '',
    // the answer's first command block (the fastest route's server command): what it says and where it is drawn
    answer_command: (() => { const p = a && a.querySelector('pre'); if (!p) return null;
      const q = p.getBoundingClientRect(); return {text: p.innerText.trim(), top: q.top, bottom: q.bottom}; })(),
    plots: plots.length,
    plots_with_svg: Array.from(plots).filter(p => p.querySelector('svg.main-svg')).length,
    tables: document.querySelectorAll('table').length,
    toc_links: document.querySelectorAll('nav a').length,
    // a cell whose text is wider than the cell (cut off, or hidden behind its neighbour)
    clipped: Array.from(document.querySelectorAll('td, th'))
      .filter(c => shown(c) && c.scrollWidth > c.clientWidth + 1)
      .map(c => c.innerText.slice(0, 80)),
    // a plain word (letters only) drawn over two lines: split mid-word ("Observe|d") by a narrow column
    split_words: Array.from(document.querySelectorAll('td, th')).filter(shown)
      .flatMap(c => {
        const out = [], walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
          if (n.parentElement.closest('pre') || !shown(n.parentElement)) continue;  // a command wraps where it must; copying keeps it whole
          for (const m of n.data.matchAll(/[A-Za-z]{2,20}/g)) {
            const range = document.createRange();
            range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
            const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
            if (tops.size > 1) out.push(m[0] + ' (in "' + c.innerText.slice(0, 40) + '")');
          }
        }
        return out;
      }),
    cut_cells: Array.from(document.querySelectorAll('td')).map(c => c.innerText.trim())
      .filter(t => t.endsWith('…')).map(t => t.slice(-80)),
    pre_texts: Array.from(document.querySelectorAll('pre')).map(p => p.innerText.trim()),
    // a chart drawn wider than its box (it then lies under its neighbour), and two charts' boxes that overlap
    charts_too_wide: Array.from(document.querySelectorAll('.chart')).filter(shown).flatMap(c => {
      const svg = c.querySelector('svg.main-svg'), box = c.getBoundingClientRect();
      return svg && svg.getBoundingClientRect().width > box.width + 2
        ? [(c.innerText.split('\\n')[0] || '').slice(0, 60) + ' (' + Math.round(svg.getBoundingClientRect().width) +
           ' px in ' + Math.round(box.width) + ')'] : [];
    }),
    // cut: drawn past the window's right edge with no scroll box around it to reach it (html's overflow-x is hidden:
    // the page itself never scrolls sideways), or a command (<pre>) whose end is out of sight until scrolled sideways
    cut: (() => {
      const out = [], vw = document.documentElement.clientWidth;
      const name = e => e.tagName.toLowerCase() + ' "' + (e.innerText || e.textContent || '').trim().slice(0, 50) + '"';
      const scrolls = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
        const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
      for (const e of document.body.querySelectorAll('*')) {
        if (e.closest('.plotly-graph-div, svg') || !shown(e)) continue;  // plotly sizes its own drawing (charts_too_wide)
        const r = e.getBoundingClientRect();
        if (r.width > 0 && r.right > vw + 1 && !scrolls(e))
          out.push(name(e) + ' reaches ' + Math.round(r.right) + ' px in a ' + vw + ' px window');
        else if (e.tagName === 'PRE' && e.scrollWidth > e.clientWidth + 1)
          out.push(name(e) + ' needs ' + e.scrollWidth + ' px in ' + e.clientWidth);
      }
      return out;
    })(),
    // a code token ("-DGGML_CUDA=ON") drawn over two lines: typed from the screen it is two words
    split_code: Array.from(document.querySelectorAll('pre, code')).filter(e => shown(e) && !e.parentElement.closest('pre, code'))
      .flatMap(e => {
        const out = [], walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
          for (const m of n.data.matchAll(/\\S{2,}/g)) {
            const range = document.createRange();
            range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
            const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
            if (tops.size > 1) out.push(m[0].slice(0, 60));
          }
        }
        return out;
      }),
    // the contents list: two items' boxes over each other, or an item's number (drawn left of its box, in the gap
    // between columns) over the text of the item beside it
    toc_overlapping: (() => {
      const items = Array.from(document.querySelectorAll('nav li')).filter(shown), out = [];
      const lines = items.map(li => { const r = document.createRange(); r.selectNodeContents(li);
        return Array.from(r.getClientRects()).filter(q => q.width > 0); });
      const marks = items.map((li, i) => { const b = li.getBoundingClientRect(), m = document.createElement('span');
        m.textContent = (i + 1) + '. '; m.style.cssText = 'position:absolute;white-space:pre;visibility:hidden';
        li.appendChild(m); const w = m.getBoundingClientRect().width; m.remove();
        const first = lines[i][0] || b;
        return {left: b.left - w, right: b.left, top: first.top, bottom: first.bottom}; });
      const hit = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
      for (let i = 0; i < items.length; i++) for (let j = 0; j < items.length; j++) {
        if (i === j) continue;
        const over = (j > i && lines[i].some(a => lines[j].some(b => hit(a, b)))) || lines[j].some(b => hit(marks[i], b));
        if (over) out.push(items[i].innerText.trim().slice(0, 40) + ' / ' + items[j].innerText.trim().slice(0, 40));
      }
      return out;
    })(),
    charts_overlapping: (() => {
      const cs = Array.from(document.querySelectorAll('.chart')).filter(shown), out = [];
      const rs = cs.map(c => { const s = c.querySelector('svg.main-svg');
        const r = (s || c).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });
      for (let i = 0; i < rs.length; i++) for (let j = i + 1; j < rs.length; j++) {
        const w = Math.min(rs[i][2], rs[j][2]) - Math.max(rs[i][0], rs[j][0]);
        const h = Math.min(rs[i][3], rs[j][3]) - Math.max(rs[i][1], rs[j][1]);
        if (w > 2 && h > 2) out.push((cs[i].innerText.split('\\n')[0] || '').slice(0, 40) + ' / ' +
                                     (cs[j].innerText.split('\\n')[0] || '').slice(0, 40));
      }
      return out;
    })(),
  };
})()"""


class ChromiumMissing(RuntimeError):
    """No Chromium on this machine: the message says how to install it."""


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str:
    """Chromium's path; installs Debian's package when it is missing and this is a root shell with apt
    (CI); otherwise raises ChromiumMissing with the command to run."""
    found = find_chromium()
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "chromium"], env=env, capture_output=True, timeout=900)
        found = find_chromium()
        if found:
            return found
    raise ChromiumMissing("Chromium is not installed: `sudo apt-get install -y chromium` (Debian/Ubuntu)")


class StartupCrash(RuntimeError):
    """Chromium ended before it opened its DevTools port (seen: -5, SIGTRAP, while another Chromium ran)."""


def _devtools_port(profile_dir: Path, proc: subprocess.Popen, timeout: float = 30) -> int:
    """Chromium writes the port it chose (--remote-debugging-port=0) into DevToolsActivePort."""
    marker = profile_dir / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartupCrash(f"chromium exited with {proc.returncode} before opening its DevTools port")
        if marker.exists() and marker.read_text().strip():
            return int(marker.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError("chromium did not open its DevTools port in time")


def _stderr_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_bytes()[-chars:].decode("utf-8", "replace").strip()
    except OSError:
        return ""


# A Unix socket's path holds at most 107 bytes; Chromium's singleton socket sits at
# <base>/lab-chromium-XXXXXXXX/tmp/org.chromium.Chromium.XXXXXX/SingletonSocket (the base plus 71), and with a longer
# path Chromium dies at start-up ("Socket path too long", exit -6): a deep $TMPDIR (a test's, a user's) then fails the
# report's check for no reason of the report's.
SOCKET_PATH_MAX, SOCKET_SUFFIX_LEN = 107, 71


def _short_temp_base() -> str:
    """$TMPDIR when Chromium's socket path fits under it, else the first short writable system temp folder."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if len(os.fsencode(base)) + SOCKET_SUFFIX_LEN <= SOCKET_PATH_MAX and os.access(base, os.W_OK | os.X_OK):
            return base
    return tempfile.gettempdir()  # nothing shorter: Chromium's own error will say so


def _start(chromium: str, width: int, height: int) -> tuple[subprocess.Popen, Path, int, tempfile.TemporaryDirectory, list[str]]:
    """Chromium started in a profile folder of its own (never a user's, never another instance's), its stderr kept in
    that folder; a start-up crash is tried once more, and said: (process, profile folder, DevTools port, the folder's
    owner to clean up, what happened at start-up). A second crash raises StartupCrash with both stderr tails."""
    said = []
    for attempt in (1, 2):
        tmp = tempfile.TemporaryDirectory(prefix="lab-chromium-", dir=_short_temp_base())
        profile_dir = Path(tmp.name)
        # Chromium puts its singleton socket in $TMPDIR (org.chromium.Chromium.XXXXXX) and leaves it there: one
        # more folder in /tmp per run. Its own TMPDIR inside the profile folder goes away with the profile.
        (profile_dir / "tmp").mkdir()
        err_path = profile_dir / "chromium-stderr.txt"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile_dir}", "--remote-debugging-port=0",
                                     f"--window-size={width},{height}", "about:blank"],
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                    env={**os.environ, "TMPDIR": str(profile_dir / "tmp")})
        try:
            return proc, profile_dir, _devtools_port(profile_dir, proc), tmp, said
        except StartupCrash as exc:
            said.append(f"start-up {attempt}: {exc}; its stderr: {_stderr_tail(err_path) or '(empty)'}")
            processes.stop(proc, grace_s=15, group=True)
            tmp.cleanup()
        except BaseException:
            processes.stop(proc, grace_s=15, group=True)
            tmp.cleanup()
            raise
    raise StartupCrash("chromium crashed twice at start-up; " + " | ".join(said))


class _Page:
    """A minimal DevTools client: send a command, wait for its answer, keep the events seen meanwhile."""

    def __init__(self, ws_url: str):
        import websocket  # websocket-client

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id, self.events = 0, []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        if any(e.get("method") == event for e in self.events):
            return
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == event:
                return
        raise TimeoutError(f"no {event} within {timeout} s")

    def close(self) -> None:
        self.ws.close()


def _console_errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append(f"exception: {d.get('text')} {(d.get('exception') or {}).get('description', '')}".strip())
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
    return out


def _requests_off_file(events: list[dict]) -> list[str]:
    urls = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    return [u for u in urls if not u.startswith(("file://", "data:", "about:", "blob:"))]


def inspect(report: str | Path, screenshot: str | Path | None = None, width: int = 1400, height: int = 900,
            settle_s: float = 1.0, full_page: bool = False, open_details: bool = False) -> dict:
    """Open `report` in headless Chromium (offline) and return what a reader would see (see PROBE), the
    console errors, the requests that tried to leave file://, and the findings judged on them. The screenshot
    is the first screen, or with full_page the whole page (at half scale: a 10,000 px page stays readable);
    open_details opens every folded table first, so its cells are judged too."""
    import urllib.request

    report = Path(report).resolve()
    chromium = ensure_chromium()
    proc, profile_dir, port, tmp, startup = _start(chromium, width, height)
    try:
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = _Page(next(t for t in targets if t.get("type") == "page")["webSocketDebuggerUrl"])
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.call(f"{domain}.enable")
            page.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1,
                      uploadThroughput=-1)
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                      mobile=False)
            page.call("Page.navigate", url=report.as_uri())
            page.wait_for("Page.loadEventFired", timeout=120)
            time.sleep(settle_s)  # plotly draws after load
            if open_details:
                page.call("Runtime.evaluate", expression="document.querySelectorAll('details').forEach(d => d.open = true)")
                time.sleep(0.3)
            seen = page.call("Runtime.evaluate", expression=PROBE, returnByValue=True)["result"]["value"]
            if screenshot:
                whole = {"captureBeyondViewport": True,
                         "clip": {"x": 0, "y": 0, "width": width, "height": seen["page_height"], "scale": 0.5}}
                shot = page.call("Page.captureScreenshot", format="png", **(whole if full_page else {}))
                evidence.write_whole(screenshot, base64.b64decode(shot["data"]))
            errors, off_file = _console_errors(page.events), _requests_off_file(page.events)
        finally:
            page.close()
    finally:
        processes.stop(proc, grace_s=15, group=True)
        tmp.cleanup()
    return {"report": str(report), "window": [width, height], **seen, "console_errors": errors,
            "requests_off_file": off_file, "screenshot": str(screenshot) if screenshot else None,
            "startup": startup, "findings": judge(seen, errors, off_file)}


def judge(seen: dict, errors: list[str], off_file: list[str]) -> list[str]:
    """What a reader would complain about; empty when the page reads right."""
    out = []
    if seen.get("answer_top") is None:
        out.append("no summary (#answer) on the page")
    elif seen["answer_top"] >= seen["inner_height"]:
        out.append(f"the summary starts below the first screen (at {seen['answer_top']:.0f} px of {seen['inner_height']})")
    if seen.get("scroll_width", 0) > seen.get("inner_width", 0):
        out.append(f"the page is wider than the window ({seen['scroll_width']} px in {seen['inner_width']} px)")
    if seen.get("plots") and seen.get("plots_with_svg") != seen.get("plots"):
        out.append(f"{seen['plots'] - seen['plots_with_svg']} of {seen['plots']} charts did not draw")
    for key, what in (("clipped", "table cell(s) cut off"), ("split_words", "word(s) split over two lines"),
                      ("cut_cells", "cell(s) ending in '…'"), ("charts_too_wide", "chart(s) wider than their box"),
                      ("charts_overlapping", "pair(s) of charts overlapping"),
                      ("cut", "element(s) cut at the right edge"), ("split_code", "code token(s) wrapped inside"),
                      ("toc_overlapping", "contents item(s) over another")):
        if seen.get(key):
            out.append(f"{len(seen[key])} {what}: " + "; ".join(map(repr, seen[key][:3])))
    out += [f"console: {e}" for e in errors]
    out += [f"tried the network: {u}" for u in off_file]
    return out


def check_run(run_dir: str | Path) -> dict | None:
    """Look at a run's report.html and keep report.png and report-check.json beside it (None when Chromium
    is not installed: a run does not install system packages; the tests do)."""
    run_dir = Path(run_dir)
    if not find_chromium() or not (run_dir / "report.html").exists():
        return None
    result = inspect(run_dir / "report.html", run_dir / "report.png")
    evidence.write_whole(run_dir / "report-check.json", json.dumps(result, indent=2, ensure_ascii=False))
    return result
