"""The daemon's JSON-lines log, with rotation, for IT.

One JSON object per line in ``daemon.jsonl`` under ``platformdirs.user_log_dir("optiond")``
(or ``--log-dir`` / ``$OPTIOND_LOG_DIR``), rotated by :class:`logging.handlers.RotatingFileHandler`
(20 MiB x 5 files by default). Files and directory are private to the user (0600 / 0700).

Every line has ``ts`` (ISO 8601 UTC), ``level``, ``logger`` and ``msg``. Requests are logged by
the ``optiond.access`` logger with ``event: "request"`` and the fields ``msg_id``, ``client``
(the sender's session id), ``op``, ``model``, ``device``, ``rows``, ``duration_ms``,
``outcome``, and ``job_id`` / ``error`` where they apply. Authentication failures are logged
(rate-limited) with ``event: "auth_failure"``. The connection key is never logged: nothing
passes it to a logger, and a filter on the handler replaces it, should it ever appear, by
``<redacted>``.

The file is written by a :class:`logging.handlers.QueueListener` thread. Log records reach it
through a :class:`logging.handlers.QueueHandler`; request lines are queued as plain maps by
:meth:`JsonLog.access` (no :class:`logging.LogRecord` is built in the request loop: the writer
thread makes it), which costs the request loop about a microsecond.

Write errors (a full disk, a vanished directory) never reach the daemon: the queue holds at
most :data:`MAX_QUEUED` records and a record that finds it full is dropped and counted, so a
stalled or failing file never grows the daemon's memory nor blocks a request. The first failed
write prints one line to stderr; from then on the writer drops what comes (counted), and every
:data:`RETRY_S` reopens the file (a log path that is a symlink is followed again) and tries
once more; once a write succeeds the log resumes, with a ``log_gap`` line saying how many lines
were lost. :meth:`JsonLog.stats` gives the counts, exported as
``optiond_log_records_dropped_total`` and ``optiond_log_write_errors_total``.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import math
import os
import queue
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import platformdirs

from ..files import private_dir

LOG_DIR_ENV = "OPTIOND_LOG_DIR"
FILE_NAME = "daemon.jsonl"
MAX_BYTES = 20 * 1024 * 1024
BACKUPS = 5
#: records waiting for the writer thread at most (about 1 KiB each); more are dropped and counted
MAX_QUEUED = 4096
#: seconds between two attempts to write again after a write error
RETRY_S = 1.0
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def log_dir(path: str | os.PathLike | None = None) -> Path:
    """Where the JSON log goes: ``path``, else ``$OPTIOND_LOG_DIR``, else the user log dir."""
    if path:
        return Path(path)
    env = os.environ.get(LOG_DIR_ENV)
    if env:
        return Path(env)
    return Path(platformdirs.user_log_dir("optiond", appauthor=False))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``msg``, the record's extra
    fields (those passed with ``extra=``) and ``exc`` for a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class Redact(logging.Filter):
    """Replaces ``secret`` in a record's message and string fields by ``<redacted>``."""

    def __init__(self, secret: str):
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        s = self.secret
        if not s:
            return True
        msg = record.getMessage()
        if s in msg:
            record.msg, record.args = msg.replace(s, "<redacted>"), None
        for k, v in list(record.__dict__.items()):
            if k not in _STANDARD and isinstance(v, str) and s in v:
                setattr(record, k, v.replace(s, "<redacted>"))
        if record.exc_info and record.exc_info[1] is not None and s in str(record.exc_info[1]):
            record.exc_info = None
            record.msg = str(record.msg).replace(s, "<redacted>") + " (traceback withheld: it held the key)"
        return True


class JsonLog:
    """The JSON-lines log of one daemon: a rotating file fed through a queue.

    Args:
        directory: see :func:`log_dir`.
        secret: a string that must never reach the file (the connection key).
        max_bytes, backups: rotation.
        level: of the ``optiond`` loggers written to the file.
        access: also log every request (``optiond.access``); False keeps only errors.

    ``path`` is the file written. :meth:`close` flushes and stops the writer thread.
    """

    def __init__(self, directory: str | os.PathLike | None = None, secret: str = "", *, max_bytes: int = MAX_BYTES,
                 backups: int = BACKUPS, level: int = logging.INFO, access: bool = True):
        d = log_dir(directory)
        private_dir(d)
        self.path = d / FILE_NAME
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # private from the first byte
        os.close(fd)
        self.file_handler = _RotatingFile(self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8",
                                          secret=secret)
        self.file_handler.setFormatter(JsonFormatter())
        self.file_handler.addFilter(Redact(secret))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.max_queued = MAX_QUEUED
        self._dropped_full = 0  # records refused at a full queue (producers, under _drop_lock)
        self._drop_lock = threading.Lock()
        self.queue_handler = _Enqueue(self)
        self.listener = _Listener(self._queue, self.file_handler, respect_handler_level=False)
        self.access_enabled = access
        self.listener.start()
        self.loggers = [logging.getLogger("optiond"), logging.getLogger("optiond.access")]
        root_level = logging.getLogger("optiond")
        root_level.addHandler(self.queue_handler)
        if root_level.getEffectiveLevel() > level:
            root_level.setLevel(level)
        self.queue_handler.setLevel(level)
        access_log = logging.getLogger("optiond.access")
        access_log.setLevel(logging.INFO if access else logging.WARNING)
        access_log.propagate = False  # requests go to the JSON file only, never to the console
        access_log.addHandler(self.queue_handler)

    def access(self, fields: dict[str, Any], warning: bool = False) -> None:
        """Queue one request line (``fields``: ``msg_id``, ``client``, ``op``, ...); the writer
        thread turns it into an ``optiond.access`` record. Thread-safe, never blocks."""
        if self.access_enabled or warning:
            fields["_t"] = time.time()
            fields["_w"] = warning
            self._offer(fields)

    def _offer(self, item: Any) -> None:
        """Queue ``item`` for the writer, or drop and count it when :attr:`max_queued` wait already."""
        if self._queue.qsize() < self.max_queued:
            self._queue.put_nowait(item)
        else:
            with self._drop_lock:
                self._dropped_full += 1

    def stats(self) -> dict[str, Any]:
        """``dropped``: records lost (queue full, or written while the file could not be);
        ``write_errors``: failed attempts to write or flush the file; ``failing``: whether the
        file is failing now; ``queued``: records waiting for the writer."""
        w = self.listener
        return {"dropped": self._dropped_full + w.dropped, "write_errors": w.write_errors,
                "failing": w.failing_since is not None, "queued": self._queue.qsize()}

    def close(self) -> None:
        for lg in self.loggers:
            lg.removeHandler(self.queue_handler)
        self.listener.stop()
        try:
            self.file_handler.close()
        except OSError:  # the last flush failed: what it held is lost, the descriptor is closed
            pass


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """A :class:`logging.handlers.RotatingFileHandler` for a busy log: it counts the bytes it
    writes instead of formatting each record twice and seeking the file to decide on a
    rollover, and leaves flushing to the writer thread (:class:`_Listener` flushes whenever
    its queue runs dry, so lines reach the file within :data:`_BATCH_S`)."""

    def __init__(self, *a: Any, secret: str = "", **kw: Any):
        super().__init__(*a, **kw)
        self._size = self.stream.tell() if self.stream is not None else 0
        self.secret = secret

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging API)
        return False  # decided in write_line, from the bytes counted

    def write_line(self, line: str) -> None:
        """Append one line (no newline in it), rotating first when the file would pass maxBytes."""
        if self.secret and self.secret in line:
            line = line.replace(self.secret, "<redacted>")
        line += "\n"
        with self.lock:
            if self.stream is None:
                self.stream = self._open()
            if self.maxBytes > 0 and self._size and self._size + len(line) >= self.maxBytes:
                self.doRollover()
                self._size = 0
                if self.stream is None:
                    self.stream = self._open()
            self.stream.write(line)
            self._size += len(line)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write_line(self.format(record))
        except Exception:  # noqa: BLE001 (logging must never raise into the daemon)
            self.handleError(record)

    def drop_stream(self) -> None:
        """Close the file after a write error, discarding what its buffer still holds (a
        failed close still releases the descriptor); the next :meth:`write_line` reopens the
        path and counts the size of the file found there."""
        with self.lock:
            stream, self.stream = self.stream, None
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
            self._size = -1

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # a new file is private too
        stream = os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)
        if getattr(self, "_size", 0) < 0:
            self._size = stream.tell()
        return stream


#: the writer thread lets records gather this long after a quiet spell (fewer wake-ups under load)
_BATCH_S = 0.005


#: text that is its own JSON string body (no quote, backslash or control character to escape)
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 _.:+/@=-]*")


def _json_value(v: Any) -> str:
    """``json.dumps(v)`` for the values of an access line, without its cost for the usual ones
    (ids, names, ints, floats); anything else goes through ``json.dumps``."""
    t = type(v)
    if t is str and _PLAIN_TEXT.fullmatch(v):
        return f'"{v}"'
    if t is int:
        return str(v)
    if t is float and math.isfinite(v):
        return repr(v)
    return json.dumps(v, default=str, ensure_ascii=False)


class _Listener(logging.handlers.QueueListener):
    """Writes the maps queued by :meth:`JsonLog.access` as ``optiond.access`` lines (straight to
    the file: no LogRecord), the records of the loggers through the handler's filters and
    formatter, and works in batches: after the queue runs dry it flushes the file and waits
    :data:`_BATCH_S`.

    It never dies of a write error: the first one is printed once to stderr and the file is
    closed; until :data:`RETRY_S` has passed the records that come are dropped (counted in
    :attr:`dropped`), then the file is reopened and the record at hand written and flushed: on
    success the log resumes with a ``log_gap`` line, else the wait starts again. Lines
    written since the last successful flush are counted as dropped when a flush fails."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.dropped = 0
        self.write_errors = 0
        #: ``time.time()`` of the first error of the current failure, None while writing works
        self.failing_since: float | None = None
        self._retry_at = 0.0
        self._unflushed = 0  # lines written into the file's buffer since the last successful flush
        self._lost_now = 0   # lines lost in the current failure

    def prepare(self, record: Any) -> Any:
        return record

    _second: tuple[int, str] = (-1, "")

    def _ts(self, t: float) -> str:
        sec = int(t)
        if self._second[0] != sec:
            self._second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
        return f"{self._second[1]}.{int((t - sec) * 1000):03d}Z"

    def _line(self, record: Any) -> str | None:
        """The JSON line of a queued map or LogRecord (None: filtered out)."""
        if isinstance(record, dict):
            t = record.pop("_t")
            level = "WARNING" if record.pop("_w") else "INFO"
            # by hand: a line per request is the busy path (json.dumps only for text that needs escapes)
            body = ", ".join(f'"{k}": {_json_value(v)}' for k, v in record.items())
            return (f'{{"ts": "{self._ts(t)}", "level": "{level}", "logger": "optiond.access", '
                    f'"msg": "request", {body}}}')
        h = self.handlers[0]
        if not h.filter(record):
            return None
        return h.format(record)

    def handle(self, record: Any) -> None:
        try:
            self._handle(record)
        except Exception:  # noqa: BLE001 (the writer thread must outlive any record)
            self._lose(1)
        if self.queue.empty():
            if self.failing_since is None:
                self._flush()
            time.sleep(_BATCH_S)

    def _handle(self, record: Any) -> None:
        if self.failing_since is not None and time.monotonic() < self._retry_at:
            self._lose(1)
            return
        line = self._line(record)
        if line is None:
            return
        try:
            self.handlers[0].write_line(line)
        except OSError as e:
            self._failed(e, pending=self._unflushed + 1)
            return
        self._unflushed += 1
        if self.failing_since is not None and self._flush():  # a retry: flushed at once to know
            self._resumed()

    def _flush(self) -> bool:
        try:
            self.handlers[0].flush()
        except OSError as e:
            self._failed(e, pending=self._unflushed)
            return False
        self._unflushed = 0
        return True

    def _lose(self, n: int) -> None:
        self.dropped += n
        self._lost_now += n

    def _failed(self, error: OSError, pending: int) -> None:
        self.write_errors += 1
        self._lose(pending)
        self._unflushed = 0
        self.handlers[0].drop_stream()
        self._retry_at = time.monotonic() + RETRY_S
        if self.failing_since is None:
            self.failing_since = time.time()
            _stderr(f"optiond: cannot write the JSON log {self.handlers[0].baseFilename} ({error}); its lines are "
                    f"dropped (optiond_log_records_dropped_total) and writing is retried every {RETRY_S:g} s")

    def _resumed(self) -> None:
        lost, since = self._lost_now, self.failing_since or time.time()
        self.failing_since, self._lost_now, self._unflushed = None, 0, 0
        h = self.handlers[0]
        gap = logging.makeLogRecord({"name": "optiond.daemon.logs", "levelno": logging.WARNING,
                                     "levelname": "WARNING", "msg": "the JSON log could not be written for a while",
                                     "event": "log_gap", "dropped": lost,
                                     "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))})
        try:
            h.write_line(h.format(gap))
        except OSError as e:
            self._failed(e, pending=1)
            return
        _stderr(f"optiond: the JSON log {h.baseFilename} is written again ({lost} lines were dropped)")


def _stderr(text: str) -> None:
    """One line to stderr, if stderr can take it (it may sit on the same full disk)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class _Enqueue(logging.handlers.QueueHandler):
    """A QueueHandler that queues the record itself (the formatting happens in the writer
    thread; the fields passed with ``extra=`` must stay on the record for the JSON), within
    the log's bound (:meth:`JsonLog._offer`)."""

    def __init__(self, log: JsonLog):
        super().__init__(log._queue)
        self._offer = log._offer

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        self._offer(record)


__all__ = ["JsonLog", "JsonFormatter", "Redact", "log_dir", "LOG_DIR_ENV", "MAX_QUEUED", "RETRY_S"]
