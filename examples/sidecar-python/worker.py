#!/usr/bin/env python3
"""A Python worker beside rinkd: one writer per symbol, fenced by rink's tokens.

Standard library only. Run it next to a rinkd (see README.md):

    python3 worker.py --rinkd http://127.0.0.1:7071 --db /tmp/ledger.db --name a BTC/ETH SOL/USD

It opens a session (the stream is its liveness: when it ends, the worker
stops everything and exits), awaits one role per symbol, and while it holds a
symbol appends to the symbol's ledger in a SQLite file with the holding's
fencing token. It stops acting on a symbol at the first of: REVOKED, the end
of the await or session stream, and the grant's validity lapsing. Then it
calls POST /v1/release with the token.

Each acquire and release is printed on stdout as one JSON line.

The first part of this file (RinkdClient, Stream, Grant) is the client to
copy; the rest (Ledger, Worker) is the example's application.
"""

import argparse
import http.client
import json
import signal
import socket
import sqlite3
import sys
import threading
import time
import urllib.parse

# ---------------------------------------------------------------------------
# The client: copy from here to "end of the client".


class RinkdError(Exception):
    """An error rinkd answered (HTTP status and gRPC status as JSON)."""

    def __init__(self, status, body):
        super().__init__("rinkd: HTTP %s: %s" % (status, body))
        self.status = status
        self.body = body


class Stream:
    """One server stream of rinkd's HTTP/JSON API: an iterator of its messages.

    rinkd sends one JSON object per line: {"result": {...}} for each message,
    {"error": {...}} if the stream fails. Iteration ends when the stream
    ends; close() (from any thread) ends it early. A call that rinkd refuses
    raises RinkdError from the iteration.

    The response's head arrives with the stream's first message: WAITING
    at once on an await stream, but `opened` on a session stream only once
    the member has joined (up to 1.5 TTLs after a restart). So only
    connecting has a timeout: a dead rinkd closes the connection, and a
    stalled one is covered by the grants' validity, which the caller
    enforces.
    """

    def __init__(self, host, port, path, body, timeout):
        self._conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self._closed = threading.Event()
        self.error = None  # the {"error": ...} object, if the stream failed
        self._conn.connect()
        self._conn.sock.settimeout(None)
        self._conn.request("POST", path, body=json.dumps(body),
                           headers={"Content-Type": "application/json"})

    def __iter__(self):
        try:
            resp = self._conn.getresponse()
        except Exception:  # closed, reset: the stream is over
            return
        if resp.status != 200:
            data = resp.read().decode("utf-8", "replace")
            self.close()
            raise RinkdError(resp.status, data)
        while True:
            try:
                line = resp.readline()
            except Exception:  # closed, reset, cut short: the stream is over
                return
            if not line:
                return
            line = line.strip()
            if not line:
                continue
            msg = json.loads(line)
            if "error" in msg:
                self.error = msg["error"]
                return
            yield msg.get("result", {})

    def close(self):
        """Ends the stream (rinkd sees the connection close)."""
        if self._closed.is_set():
            return
        self._closed.set()
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()


class Grant:
    """A holding of a role: act on it only while valid(), with token.

    The grant is valid until the earliest of valid_until_unix_ms (wall
    clock) and the time it was read plus valid_for_ms (monotonic clock);
    renew() moves that on for a RENEWED event of the same token; end()
    makes it invalid for good.
    """

    def __init__(self, ev):
        self.role = ev["role"]
        self.token = int(ev["token"])
        self.lock = threading.Lock()  # held while acting, and by end()
        self._deadline = 0.0  # time.monotonic()
        self.ended = None  # why it ended, once it has
        self._set(ev)

    def _set(self, ev):
        now_mono, now_wall = time.monotonic(), time.time()
        by_wall = int(ev.get("valid_until_unix_ms", "0")) / 1000.0 - now_wall
        by_read = int(ev.get("valid_for_ms", "0")) / 1000.0
        d = now_mono + max(0.0, min(by_wall, by_read))
        if d > self._deadline:
            self._deadline = d

    def renew(self, ev):
        with self.lock:
            if self.ended is None and int(ev["token"]) == self.token:
                self._set(ev)

    def valid(self):
        """Call with self.lock held, right before acting."""
        return self.ended is None and time.monotonic() < self._deadline

    def deadline_wall(self):
        return time.time() + (self._deadline - time.monotonic())

    def end(self, reason):
        """Makes the grant invalid; waits for an act in progress (lock)."""
        with self.lock:
            if self.ended is not None:
                return False
            self.ended = reason
            return True


class RinkdClient:
    """rinkd's HTTP/JSON API (proto/rink/v1/rink.proto, rink_http.yaml)."""

    def __init__(self, base_url="http://127.0.0.1:7071", timeout=10.0):
        u = urllib.parse.urlsplit(base_url)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout = timeout

    def _call(self, method, path, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", "replace")
            if resp.status != 200:
                raise RinkdError(resp.status, text)
            return json.loads(text) if text else {}
        finally:
            conn.close()

    def open_session(self):
        """POST /v1/session: the first message is {"opened": {"session": ...}}."""
        return Stream(self.host, self.port, "/v1/session", {}, self.timeout)

    def await_role(self, session, role):
        """POST /v1/await: GRANTED, RENEWED, REVOKED, ... of one role."""
        return Stream(self.host, self.port, "/v1/await", {"session": session, "role": role}, self.timeout)

    def release(self, session, role, token):
        return self._call("POST", "/v1/release", {"session": session, "role": role, "token": str(token)})

    def owners(self, role):
        return self._call("GET", "/v1/owners?" + urllib.parse.urlencode({"role": role}))

    def ready(self):
        return self._call("GET", "/v1/ready")


# end of the client
# ---------------------------------------------------------------------------


class Ledger:
    """Each symbol's ledger in a SQLite file, shared by every worker.

    append() is one transaction that takes the database's write lock,
    checks that the grant is still valid, and accepts the entry only if its
    token is not lower than the highest token the symbol has seen: the
    store itself refuses a stale holder, whatever the holder believes.
    """

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS fence (symbol TEXT PRIMARY KEY, token INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS ledger (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        symbol TEXT NOT NULL, token INTEGER NOT NULL, worker TEXT NOT NULL,
        seq INTEGER NOT NULL, ts REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS refused (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        symbol TEXT NOT NULL, token INTEGER NOT NULL, fence INTEGER NOT NULL,
        worker TEXT NOT NULL, ts REAL NOT NULL);
    """

    def __init__(self, path):
        self.db = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(self.SCHEMA)
        self.mu = threading.Lock()  # one connection, used by every thread

    def append(self, grant, worker, seq):
        """Returns "ok", "refused" (a higher token wrote) or "lapsed"."""
        with self.mu:
            cur = self.db.cursor()
            cur.execute("BEGIN IMMEDIATE")  # the write lock, before the checks
            try:
                if not grant.valid():
                    cur.execute("ROLLBACK")
                    return "lapsed"
                row = cur.execute("SELECT token FROM fence WHERE symbol=?", (grant.role,)).fetchone()
                if row is not None and grant.token < row[0]:
                    cur.execute("INSERT INTO refused (symbol, token, fence, worker, ts) VALUES (?,?,?,?,?)",
                                (grant.role, grant.token, row[0], worker, time.time()))
                    cur.execute("COMMIT")
                    return "refused"
                cur.execute("INSERT INTO fence (symbol, token) VALUES (?,?) "
                            "ON CONFLICT(symbol) DO UPDATE SET token=excluded.token", (grant.role, grant.token))
                cur.execute("INSERT INTO ledger (symbol, token, worker, seq, ts) VALUES (?,?,?,?,?)",
                            (grant.role, grant.token, worker, seq, time.time()))
                cur.execute("COMMIT")
                return "ok"
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise


class Worker:
    def __init__(self, client, ledger, name, symbols, every):
        self.client, self.ledger, self.name = client, ledger, name
        self.symbols, self.every = symbols, every
        self.session = None
        self.sess = None
        self.stop_mu = threading.Lock()
        self.over = threading.Event()  # the session is over: stop everything
        self.out_mu = threading.Lock()
        self.streams_mu = threading.Lock()
        self.streams = set()
        self.grants = {}  # symbol -> the current Grant, if any
        self.grants_mu = threading.Lock()
        self.await_streams = {}  # symbol -> its open await Stream
        self.last_write = {}  # (symbol, token) -> time of the last accepted write

    def log(self, event, **kw):
        rec = {"ts": time.time(), "worker": self.name, "event": event}
        rec.update(kw)
        with self.out_mu:
            sys.stdout.write(json.dumps(rec) + "\n")
            sys.stdout.flush()

    def run(self):
        for attempt in range(100):  # a previous session of this rinkd may still be ending (409)
            sess = self.client.open_session()
            self.sess = sess
            events = iter(sess)
            try:
                first = next(events, None)
                break
            except RinkdError as e:
                if e.status != 409 or attempt == 99:
                    raise
                time.sleep(0.1)
        if self.over.is_set():  # stopped while opening
            return
        if not first or "opened" not in first:
            raise RuntimeError("session did not open: %r %r" % (first, sess.error))
        self.session = first["opened"]["session"]
        self.log("session", session=self.session, member=first["opened"]["member"])
        threads = [threading.Thread(target=self.await_loop, args=(s,), daemon=True) for s in self.symbols]
        threads += [threading.Thread(target=self.act_loop, args=(s,), daemon=True) for s in self.symbols]
        for t in threads:
            t.start()
        reason = "session stream ended"
        for ev in events:
            if "rank" in ev:
                rk = ev["rank"]
                self.log("rank", index=rk["index"], size=rk["size"], settled=rk["settled"], version=int(rk["version"]))
            elif "ended" in ev:
                reason = "session ended: " + ev["ended"].get("reason", "")
        if sess.error:
            reason = "session failed: %s" % sess.error.get("message")
        self.stop(reason)

    def stop(self, reason):
        """The session is over: end every grant, then every stream."""
        with self.stop_mu:
            if self.over.is_set():
                return
            self.over.set()
        with self.grants_mu:  # (follow installs no grant after this)
            grants = list(self.grants.values())
        for g in grants:
            self.finish(g, "session-over")
        with self.streams_mu:
            streams = list(self.streams)
        for s in streams:
            s.close()
        if self.sess is not None:
            self.sess.close()  # ends the session: rinkd hands the roles over
        self.log("stopped", reason=reason)

    def finish(self, g, reason, release=False):
        """Stops acting on g (first call only), logs it, releases it."""
        if not g.end(reason):  # waits for a write in progress
            return
        last = self.last_write.get((g.role, g.token))
        # The holding ended when the worker stopped, or at its deadline if
        # that came first (no write starts after it): whichever is earlier,
        # but not before its last write committed.
        until = min(time.time(), g.deadline_wall())
        if last is not None:
            until = max(until, last)
        self.log("release", symbol=g.role, token=g.token, reason=reason, until=until, last_write=last)
        if release and not self.over.is_set():
            try:
                self.client.release(self.session, g.role, g.token)
            except (RinkdError, OSError) as e:
                self.log("release-failed", symbol=g.role, token=g.token, error=str(e))

    def await_loop(self, symbol):
        while not self.over.is_set():
            try:
                stream = self.client.await_role(self.session, symbol)
            except OSError as e:
                self.log("await-failed", symbol=symbol, error=str(e))
                self.over.wait(0.2)
                continue
            with self.streams_mu:
                self.streams.add(stream)
            self.await_streams[symbol] = stream
            if self.over.is_set():
                stream.close()
            try:
                self.follow(symbol, stream)
            except RinkdError as e:
                if not self.over.is_set():
                    self.log("await-failed", symbol=symbol, error=str(e))
            self.await_streams.pop(symbol, None)
            with self.streams_mu:
                self.streams.discard(stream)
            stream.close()
            g = self.grants.get(symbol)
            if g is not None:
                # (When the worker ended the stream, rinkd took that as a
                # release already; when rinkd did, its session is likely
                # over and the call fails, harmlessly.)
                self.finish(g, "await-ended", release=True)
            self.over.wait(0.1)

    def follow(self, symbol, stream):
        for ev in stream:
            kind = ev.get("kind")
            if kind == "GRANTED":
                g = Grant(ev)
                old = self.grants.get(symbol)
                if old is not None:
                    self.finish(old, "regranted", release=True)
                with self.grants_mu:  # stop() ends every grant it finds here
                    if self.over.is_set():
                        return
                    self.log("acquire", symbol=symbol, token=g.token, valid_for_ms=int(ev.get("valid_for_ms", "0")))
                    self.grants[symbol] = g
            elif kind == "RENEWED":
                g = self.grants.get(symbol)
                if g is not None:
                    g.renew(ev)
            elif kind == "REVOKED":
                g = self.grants.get(symbol)
                if g is not None and g.token == int(ev["token"]):
                    self.finish(g, "revoked:" + ev.get("reason", ""), release=True)
            if self.over.is_set():
                return

    def act_loop(self, symbol):
        seq = 0
        while not self.over.wait(self.every):
            g = self.grants.get(symbol)
            if g is None or g.ended is not None:
                continue
            with g.lock:
                lapsed = not g.valid() and g.ended is None
                if g.valid() and not self.over.is_set():
                    seq += 1
                    try:
                        res = self.ledger.append(g, self.name, seq)
                    except sqlite3.Error as e:  # e.g. locked for too long: try again
                        self.log("write-failed", symbol=symbol, token=g.token, error=str(e))
                        res = "failed"
                    if res == "ok":
                        key = (symbol, g.token)
                        if key not in self.last_write:
                            self.log("first-write", symbol=symbol, token=g.token)
                        self.last_write[key] = time.time()
                    elif res == "refused":
                        self.log("refused", symbol=symbol, token=g.token)
                    elif res == "lapsed":
                        lapsed = True
            if lapsed:
                self.finish(g, "lapsed", release=True)
                # End the await stream (rinkd takes it as the app's letting
                # go); await_loop awaits the symbol afresh.
                s = self.await_streams.get(symbol)
                if s is not None:
                    s.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rinkd", default="http://127.0.0.1:7071", help="rinkd's HTTP address")
    p.add_argument("--db", default="ledger.db", help="the SQLite file of the ledger (shared by the workers)")
    p.add_argument("--name", default=socket.gethostname(), help="this worker's name in the ledger and logs")
    p.add_argument("--every", type=float, default=0.05, help="seconds between writes per symbol")
    p.add_argument("symbols", nargs="+", help='symbols to work on, e.g. "BTC/ETH" "SOL/USD"')
    a = p.parse_args()
    w = Worker(RinkdClient(a.rinkd), Ledger(a.db), a.name, a.symbols, a.every)
    # SIGTERM: stop acting, end the session (rinkd hands the roles over).
    # (stop takes locks: not in the handler itself, which interrupts the
    # main thread wherever it is.)
    stopper = lambda *_: threading.Thread(target=w.stop, args=("signal",)).start()
    signal.signal(signal.SIGTERM, stopper)
    signal.signal(signal.SIGINT, stopper)
    w.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
