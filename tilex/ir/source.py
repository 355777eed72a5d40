"""Where in the user's program a statement was written, and errors that say so.

TVMScript (TVM 0.27) attaches a source span (``tvm.ir.Span``: file, line, columns) to the statements and calls it
builds, so a tile operator's call -- ``T.copy(...)``, ``T.gemm(...)`` -- and a ``T.Parallel`` loop carry the place the
user wrote them (a ``SequentialSpan`` when a ``T.macro`` was inlined). Passes that rebuild an operator's call pass
its span on. The code that asks operators for layouts or lowers them (transform/layout_inference.py,
transform/lower_tile_ops.py) adds that place to an error with :func:`add_location`; the engine's entry points then
give user errors back with a short traceback, the whole one with ``TILEX_BACKTRACE=1`` (:func:`backtrace_requested`).
"""
from __future__ import annotations

import linecache
import os
import threading
import warnings

from tvm import ir

#: environment variable: 1 shows tilex's and TVM's frames for errors in a user's program
BACKTRACE_ENV = "TILEX_BACKTRACE"

#: attribute set on an exception whose message already names its place in the user's program
LOCATION_ATTR = "tilex_location"


class TileScriptError(RuntimeError):
    """A tile program that TVMScript could not parse: an undefined name, an unsupported Python construct, ...

    The message says what is wrong, then the file, line and the source line with a caret. (Errors that Python code
    in a program body raises itself -- a ``ValueError`` from ``T.Kernel``, a ``TypeError`` for an unknown keyword of
    a tile operator -- keep their own type and get the same location lines.)
    """


def backtrace_requested() -> bool:
    """Whether the user asked for full tracebacks (``TILEX_BACKTRACE=1``)."""
    return os.environ.get(BACKTRACE_ENV, "0").strip().lower() not in ("", "0", "false", "no")


def spans(span) -> list:
    """The plain spans of `span` (a SequentialSpan lists one per inlining level); [] for None."""
    if span is None:
        return []
    if isinstance(span, ir.SequentialSpan):
        return [s for s in span.spans if isinstance(s, ir.Span)]
    return [span] if isinstance(span, ir.Span) else []


def _usable(span) -> bool:
    name = span.source_name.name if span.source_name is not None else ""
    return bool(name) and span.line > 0


def span_of(*nodes):
    """The first source span found on `nodes` (Calls, statements), or None."""
    for node in nodes:
        span = getattr(node, "span", None) if node is not None else None
        if any(_usable(s) for s in spans(span)):
            return span
    return None


def location(span) -> str | None:
    """``file:line`` of `span` (the innermost place of an inlined macro first, then where it was called)."""
    places = [f"{s.source_name.name}:{s.line}" for s in spans(span) if _usable(s)]
    if not places:
        return None
    return " (inlined at ".join(reversed(places)) + ")" * (len(places) - 1)


def warn_at(message: str, category, span) -> None:
    """Issue warning `message` as raised where the user wrote `span` (the innermost usable place), or from tilex's
    caller when there is none."""
    places = [s for s in spans(span) if _usable(s)] if span is not None else []
    if places:
        warnings.warn_explicit(message, category, places[0].source_name.name, places[0].line)
    else:
        warnings.warn(message, category, stacklevel=3)


def _snippet(span) -> list:
    """TVMScript's rendering of one span: `` --> file:line:col`` and the source line with a caret under it."""
    name = span.source_name.name
    lines = [f" --> {name}:{span.line}:{span.column}"]
    text = linecache.getline(name, span.line).rstrip("\n")
    if not text:
        return lines
    width = len(str(span.line)) + 2
    start = max(span.column, 1)
    stop = span.end_column if span.end_line == span.line and span.end_column > start else len(text) + 1
    caret = "".join("^" if start <= i < stop else " " for i in range(1, len(text) + 1)).rstrip()
    lines += [" " * width + "|", f" {span.line} |  {text}", " " * width + "|  " + caret]
    return lines


def render(span) -> str:
    """The place(s) of `span` as lines to append to an error message (empty if it has none)."""
    out = []
    for i, s in enumerate(reversed([s for s in spans(span) if _usable(s)])):
        if i:
            out.append(" (inlined from a macro called here)")
        out += _snippet(s)
    return "\n".join(out)


def set_message(exc: BaseException, message: str) -> bool:
    """Replace `exc`'s message, keeping its type; False if its class does not print its args as given."""
    old = exc.args
    exc.args = (message,)
    try:
        if str(exc) == message:
            return True
    except Exception:  # noqa: BLE001 - a __str__ that needs the old args
        pass
    exc.args = old
    return False


def add_location(exc: BaseException, span):
    """Append where the user wrote the failing operator (`span`) to `exc`'s message, once; its type is kept.

    Returns `exc` (to be re-raised by the caller)."""
    if span is None or getattr(exc, LOCATION_ATTR, None) is not None:
        return exc
    where = location(span)
    if where is None:
        return exc
    text = render(span)
    if not (len(exc.args) == 1 and isinstance(exc.args[0], str) and set_message(exc, f"{exc.args[0]}\n{text}")):
        exc.add_note(text)
    try:
        setattr(exc, LOCATION_ATTR, where)
    except AttributeError:  # an exception class with __slots__
        pass
    return exc


def is_located(exc: BaseException) -> bool:
    """Whether `exc` names its place in the user's program (set by :func:`add_location`)."""
    return getattr(exc, LOCATION_ATTR, None) is not None


_kept = threading.local()


def keep_pass_error(exc: BaseException) -> BaseException:
    """`exc`, kept for :func:`take_pass_error`: a user error a tilex pass raises inside TVM's pass manager, which
    gives back a plain RuntimeError; the engine re-raises the kept one, its type intact."""
    _kept.error = exc
    return exc


def take_pass_error() -> BaseException | None:
    """The error :func:`keep_pass_error` kept last in this thread (once), if any."""
    err = getattr(_kept, "error", None)
    _kept.error = None
    return err
