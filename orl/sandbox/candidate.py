"""The candidate process: runs prompt + completion, then answers the test process's calls.

Runs inside the sandbox (joined into one program with wire.py and confine.py by
orl/sandbox/stub.py): standard library only. Nothing here is trusted after the
candidate's code has started: the candidate may replace any function of this process.
That is harmless by construction, because this process holds no verdict, no test and
no channel to the harness; all it can do is answer calls, and the answers are decoded
as plain data by the test process (orl/sandbox/judge.py).

Replies, one frame per message (wire.py):
    {"ready": true} | {"load_error": "<Type>: <message>"}       once, after the module ran
    {"value": <plain data>}                                    the call returned plain data
    {"raised": ["<Type>", "<Base>", ...], "message": "..."}    the call raised (class names of its MRO)
    {"items": [<plain data>, ...]}                             the call returned an iterator (below)
    {"items": [...], "raised": [...], "message": "..."}        ... which raised after yielding these
    {"not_plain": "<why>"}                                     the call returned something else

An iterator is any object whose class defines __next__: a generator, map, filter, zip,
enumerate, reversed, iter(...), the itertools objects, an instance of a class with
__next__. It is drained here, right after the call returns, and its items must be plain
data and fit, encoded, within the wire's size limit (SandboxLimits.wire_bytes) together:
an endless iterator is refused when it passes that limit, or the run times out first.
Async generators and coroutines are not iterators: refused as not plain data.
"""

import os
import sys

from .confine import enter, read_job
from .wire import NotPlainData, dumps, receive, send

MESSAGE_CHARS = 1000  # of an exception's text


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:
        text = "(unprintable message)"
    name = type(exc).__name__
    return f"{name}: {text[:MESSAGE_CHARS]}" if text else name


def _raised(exc: BaseException) -> dict:
    try:
        names = [str(cls.__name__)[:100] for cls in type(exc).__mro__][:20]
        text = str(exc)[:MESSAGE_CHARS]
    except BaseException:
        names, text = ["Exception"], "(unprintable exception)"
    return {"raised": names, "message": text}


def _drain(iterator, limit: int) -> dict:
    """The items of an iterator the call returned, and what it raised (see the module docstring).
    NotPlainData as soon as an item is not plain data or the items pass `limit` bytes encoded."""
    items, size = [], 0
    try:
        for item in iterator:
            size += len(dumps(item, limit - size))
            items.append(item)
    except NotPlainData:
        raise
    except BaseException as exc:
        return {"items": items, **_raised(exc)}
    return {"items": items}


def _reply_to(call: dict, function, limit: int) -> dict:
    args, kwargs = call.get("args"), call.get("kwargs")
    if type(args) is not tuple or type(kwargs) is not dict:
        return {"raised": ["RuntimeError"], "message": "bad call from the tests"}
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # SystemExit too: the test process decides what it means
        return _raised(exc)
    if hasattr(type(value), "__next__"):
        return _drain(value, limit)
    return {"value": value}  # send() refuses it if it is not plain data


def main() -> None:
    job = read_job()
    enter(job["confine"])
    requests, replies, limit = job["request_fd"], job["reply_fd"], job["wire_bytes"]
    namespace = {"__name__": "__orl_candidate__"}
    try:
        exec(compile(job["code"], "<candidate>", "exec"), namespace)
        function = namespace.get(job["entry_point"]) if job["entry_point"] else None
        if job["entry_point"] and not callable(function):
            raise NameError(
                f"the entry point {job['entry_point']!r} is not a function the completion defines"
            )
    except BaseException as exc:
        send(replies, {"load_error": _describe(exc)}, limit)
        os._exit(1)
    send(replies, {"ready": True}, limit)
    while True:
        call = receive(requests, limit)
        if call is None:  # the tests are done
            sys.stdout.flush()
            os._exit(0)
        try:
            send(replies, _reply_to(call, function, limit), limit)
        except NotPlainData as exc:
            send(replies, {"not_plain": str(exc)}, limit)
        except RecursionError:
            send(replies, {"not_plain": "nested too deeply"}, limit)
