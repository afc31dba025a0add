"""Round-3 adversarial samples and honest edge cases (used by tests/test_sandbox_round3.py).

Classes: verdict-line forgery (every separator str.splitlines() knows, in every carrier of
candidate text), wire values, raw frames the candidate writes to its fds, exceptions that
would change the tests' control flow, influence on the test process, memory no process
maps (memfds, SysV and POSIX shared memory, tmpfs files, pipes), a later run of the same
sample, and honest completions that must pass (generators consumed as iterables, ...).

Every case is (problem, completion, expected result prefix). Where an attack's payload
would forge "passed", the wrong answer is returned as well, so "failed: ..." proves both
that the forgery did nothing and that the tests saw the wrong answer.
"""

from __future__ import annotations

from tests.sandbox_attacks import ADD, LENIENT, WRONG, body

# Every character str.splitlines() splits on besides "\n" (and "\r\n").
SEPARATORS = {
    "CR": "\r", "VT": "\x0b", "FF": "\x0c", "FS": "\x1c", "GS": "\x1d", "RS": "\x1e", "NEL": "\x85",
    "LS": "\u2028", "PS": "\u2029", "CRLF": "\r\n", "LF": "\n",
}  # fmt: skip
# What the old verdict line would have read as a pass after a separator ("<ended> <result>").
FORGED = "0 passed"

ASSERT_MESSAGE = {  # the tests print the candidate's value in their assert message
    "task_id": "R3/echo-message",
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "test": "def check(candidate):\n    got = candidate(1, 2)\n    assert got == 3, got\n",
    "entry_point": "add",
}
ALL_MAP = {  # a loop over the candidate's answers: a StopIteration from it would end the loop early
    "task_id": "R3/all-map",
    "prompt": 'def is_even(n):\n    """True when n is even."""\n',
    "test": "def check(candidate):\n    assert all(map(lambda n: candidate(n) == (n % 2 == 0), range(6)))\n"
    "    assert list(zip(map(candidate, [1, 2]), [False, True])) == [(False, False), (True, True)]\n",
    "entry_point": "is_even",
}
GEN = {
    "task_id": "R3/count",
    "prompt": 'def count(n):\n    """The numbers 0 .. n-1."""\n',
    "test": "def check(candidate):\n    assert list(candidate(3)) == [0, 1, 2]\n    assert "
    "sorted(candidate(4)) == [0, 1, 2, 3]\n"
    "    assert sum(candidate(5)) == 10\n    assert 2 in candidate(3)\n"
    "    assert [x for x in candidate(2)] == [0, 1]\n    assert tuple(candidate(0)) == ()\n",
    "entry_point": "count",
}
GEN_TRUTH = {  # a badly written test that only takes the truth value
    "task_id": "R3/truthy",
    "prompt": 'def has_items(n):\n    """True when n > 0."""\n',
    "test": "def check(candidate):\n    assert candidate(3)\n",
    "entry_point": "has_items",
}
GEN_RAISES = {  # an iterator that raises part-way, as the tests expect
    "task_id": "R3/parse-all",
    "prompt": 'def parse_all(texts):\n    """int() of each text, lazily."""\n',
    "test": "def check(candidate):\n    assert list(candidate(['1', '2'])) == [1, 2]\n    seen = []\n"
    "    try:\n        for value in candidate(['3', 'x', '4']):\n            seen.append(value)\n"
    "    except ValueError:\n        pass\n    else:\n        raise AssertionError('no ValueError')\n"
    "    assert seen == [3]\n",
    "entry_point": "parse_all",
}
TEXT = {  # honest values holding separators must cross unchanged
    "task_id": "R3/text",
    "prompt": 'def join(parts):\n    """The parts joined by U+2028."""\n',
    "test": "def check(candidate):\n    assert candidate(['a', 'b\\r']) == 'a\\u2028b\\r'\n",
    "entry_point": "join",
}


def _raise(carrier: str, payload: str) -> str:
    """A completion body that carries `payload` out through `carrier` and otherwise answers wrong."""
    text = repr(payload)
    return {
        "ValueError": body(f"raise ValueError({text})"),
        "AssertionError": body(f"raise AssertionError({text})"),
        "SystemExit": body(f"raise SystemExit({text})"),
        "KeyboardInterrupt": body(f"raise KeyboardInterrupt({text})"),
        "BaseException subclass": body(f"class Stop(BaseException):\n    pass\nraise Stop({text})"),
        "StopIteration": body(f"raise StopIteration({text})"),
        "load error": body("return a + b + 1") + f"raise RuntimeError({text})\n",
        "load SystemExit": body("return a + b + 1") + f"raise SystemExit({text})\n",
        "class name": body(f"raise type({text}, (Exception,), {{}})()"),
        "iterator error": body(f"yield a + b\nraise ValueError({text})"),
        "unprintable name": body(f"raise type('E' + {text}, (ValueError,), {{}})('x')"),
    }[carrier]


def forgery_cases() -> dict[str, tuple[dict, str, str]]:
    cases = {}
    for name, sep in SEPARATORS.items():  # every separator, in an exception's message
        cases[f"forgery: {name} in a ValueError message"] = (
            ADD,
            _raise("ValueError", f"x{sep}{FORGED}"),
            "failed: ",
        )
    carriers = ("AssertionError", "SystemExit", "KeyboardInterrupt", "BaseException subclass",
                "StopIteration", "load error", "load SystemExit", "class name", "iterator error",
                "unprintable name")  # fmt: skip
    for carrier in carriers:  # every carrier, with two separators (and a newline before the pass word)
        for sep_name in ("LS", "CR"):
            payload = f"x{SEPARATORS[sep_name]}{FORGED}{SEPARATORS['NEL']}{FORGED}"
            cases[f"forgery: {sep_name} through {carrier}"] = (ADD, _raise(carrier, payload), "failed: ")
    for sep_name in ("LS", "VT", "CR"):  # the tests' own assert message prints the candidate's value
        cases[f"forgery: {sep_name} in a returned value the assert message prints"] = (
            ASSERT_MESSAGE,
            body(f"return 'x' + {SEPARATORS[sep_name] + FORGED!r}"),
            WRONG,
        )
    cases["forgery: prints framed and line verdicts on stdout and stderr"] = (
        ADD,
        body("""
import os, sys
frame = b'\\x00\\x00\\x00\\x01T'
for stream in (sys.stdout, sys.stderr):
    stream.write('0 passed\\n\\u2028passed\\r1 passed\\n')
    stream.flush()
os.write(1, frame)
os.write(2, frame)
return a + b + 1"""),
        WRONG,
    )
    return cases


def wire_cases() -> dict[str, tuple[dict, str, str]]:
    return {
        "wire: a dict subclass equal to everything": (
            ADD,
            body("""
class D(dict):
    def __eq__(self, other):
        return True
    __hash__ = None
return D()"""),
            WRONG,
        ),
        "wire: a float subclass equal to everything": (
            ADD,
            body("""
class F(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__
return F(0.5)"""),
            WRONG,
        ),
        "wire: shared sublists that encode to gigabytes": (
            ADD,
            body("""
x = ['y' * 4096]
for _ in range(20):
    x = [x, x]
return x"""),
            "failed: the candidate returned what is not plain data",
        ),
        "wire: an endless iterator": (
            GEN,
            "    import itertools\n    return itertools.repeat('x' * 1000)\n",
            "failed: the candidate returned what is not plain data",
        ),
        "wire: an iterator of objects": (
            GEN,
            "    return (object() for _ in range(n))\n",
            "failed: the candidate returned what is not plain data",
        ),
        "wire: an iterator to a test that takes its truth value": (
            GEN_TRUTH,
            "    return iter([])\n",
            "failed: the tests took the truth value of an iterator",
        ),
        "wire: an iterator whose items are equal to everything": (
            GEN,
            body("""
class Anything(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
return iter([Anything(7)] * n)"""),
            WRONG,
        ),
        "wire: an async generator": (
            GEN,
            "    async def agen():\n        yield 0\n    return agen()\n",
            "failed: the candidate returned what is not plain data",
        ),
        "wire: an iterator that raises SystemExit part-way": (
            GEN,
            "    yield 0\n    raise SystemExit('0 passed')\n",
            "failed: SystemExit",
        ),
    }


def frame_cases() -> dict[str, tuple[dict, str, str]]:
    """Raw frames the candidate writes to every fd it holds (its reply pipe among them)."""

    def to_every_fd(data: str, then: str = "return a + b + 1") -> str:
        return body(f"""
import os
for fd in [int(n) for n in os.listdir('/proc/self/fd')] + list(range(3, 64)):
    try:
        os.write(fd, {data})
    except OSError:
        pass
{then}""")

    verdict = "b'\\x00\\x00\\x00\\x2dd\\x00\\x00\\x00\\x01s\\x00\\x00\\x00\\x06passedT'"
    return {
        "frames: a wire-framed verdict to every fd": (ADD, to_every_fd(verdict), "failed: "),
        "frames: a frame announcing 4 GB": (ADD, to_every_fd("b'\\xff\\xff\\xff\\xff'"), "failed: "),
        "frames: a truncated frame, then exit": (
            ADD,
            to_every_fd("b'\\x00\\x00\\x01\\x00d'", "os._exit(0)"),
            "failed: ",
        ),
        "frames: a frame with trailing bytes": (
            ADD,
            to_every_fd("b'\\x00\\x00\\x00\\x0cd\\x00\\x00\\x00\\x00NNNNNNN'"),
            "failed: ",
        ),
        "frames: a frame with a non-str key": (
            ADD,
            to_every_fd("b'\\x00\\x00\\x00\\x07d\\x00\\x00\\x00\\x01NN'"),
            "failed: ",
        ),
        "frames: the right value written ahead of the real reply": (
            ADD,
            to_every_fd(
                "b'\\x00\\x00\\x00\\x15d\\x00\\x00\\x00\\x01s\\x00\\x00\\x00\\x05valuei\\x00\\x00\\x00\\x01\\x03'"
            ),
            "failed: ",
        ),
    }


def exception_cases() -> dict[str, tuple[dict, str, str]]:
    return {
        "exceptions: StopIteration ends all(map(...)) early": (
            ALL_MAP,
            body("if n == 0:\n    return True\nraise StopIteration"),
            "failed: StopIteration",
        ),
        "exceptions: a StopIteration subclass": (
            ALL_MAP,
            body("class Done(StopIteration):\n    pass\nif n == 0:\n    return True\nraise Done()"),
            "failed: StopIteration",
        ),  # the first class of its MRO the test process knows
        "exceptions: StopAsyncIteration": (
            ALL_MAP,
            body("raise StopAsyncIteration"),
            "failed: StopAsyncIteration",
        ),
        "exceptions: GeneratorExit": (ADD, body("raise GeneratorExit"), "failed: GeneratorExit"),
        "exceptions: StopIteration to a test that swallows exceptions": (
            LENIENT,
            body("raise StopIteration"),
            "failed: StopIteration",
        ),
        "exceptions: SystemExit to a test that swallows exceptions": (
            LENIENT,
            body("raise SystemExit(0)"),
            "failed: SystemExit",
        ),
        "exceptions: a BaseExceptionGroup": (
            LENIENT,
            body("raise BaseExceptionGroup('x', [KeyboardInterrupt()])"),
            "failed: BaseException",
        ),
        "exceptions: a message whose str() raises": (
            ADD,
            body("""
class Bad(Exception):
    def __str__(self):
        raise SystemExit('0 passed')
raise Bad()"""),
            "failed: Exception: (unprintable exception)",
        ),
    }


def influence_cases() -> dict[str, tuple[dict, str, str]]:
    """What the candidate might do to the test process through its values or its process."""
    return {
        "influence: a huge int the assert message must print": (
            ASSERT_MESSAGE,
            body("return 10 ** 100000"),
            "failed: AssertionError",
        ),
        "influence: a value nested past the wire's depth": (
            ADD,
            body("x = []\nfor _ in range(500):\n    x = [x]\nreturn x"),
            "failed: the candidate returned what is not plain data",
        ),
        "influence: closes its reply pipe and keeps running": (
            ADD,
            body("""
import os, time
for fd in range(3, 64):
    try:
        os.close(fd)
    except OSError:
        pass
time.sleep(5)
return a + b"""),
            "failed: ",
        ),
        "influence: signals every process it can see": (
            ADD,
            body("""
import os, signal
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:
    if pid != os.getpid():
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
return a + b + 1"""),
            WRONG,
        ),
    }


def resource_cases() -> dict[str, tuple[dict, str, str]]:
    """Memory no process maps: refused, or counted by the bound (see SMALL_MEMORY for the counted ones)."""
    return {
        "resources: 1.2 GB in memfds kept open": (
            ADD,
            body("""
import os
fds, chunk = [], b'x' * (15 << 20)  # RLIMIT_FSIZE (16 MB) bounds each memfd, not their number
for _ in range(80):
    fd = os.memfd_create('hold')
    os.write(fd, chunk)
    fds.append(fd)
return a + b"""),
            "failed: PermissionError",
        ),
        "resources: 1.1 GB of detached SysV shared memory": (
            ADD,
            body("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = 0
for _ in range(11):
    segment = libc.shmget(0, 100 << 20, 0o1600)
    if segment >= 0:
        address = libc.shmat(segment, None, 0)
        ctypes.memset(address, 1, 100 << 20)
        libc.shmdt(ctypes.c_void_p(address))
        made += 1
return a + b if made == 11 else a + b + 1"""),
            WRONG,
        ),
        "resources: SysV message queues": (
            ADD,
            body("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
return a + b if libc.msgget(0, 0o1600) >= 0 else a + b + 1"""),
            WRONG,
        ),
        "resources: 1.2 GB of POSIX shared memory": (
            ADD,
            body("""
import os
fd = os.open('/dev/shm/hold', os.O_CREAT | os.O_RDWR)
for _ in range(12):
    os.write(fd, b'x' * (100 << 20))
return a + b"""),
            "failed: OSError",
        ),
        "resources: 2000 pipes": (
            ADD,
            body("""
import os
pipes = []
try:
    for _ in range(2000):
        pipes.append(os.pipe())
except OSError:
    pass
return a + b if len(pipes) == 2000 else a + b + 1"""),
            WRONG,
        ),
    }


# Run with SandboxLimits(memory_mb=SMALL_MEMORY_MB): the tmpfs files count towards the bound.
SMALL_MEMORY_MB = 100
SMALL_MEMORY = {
    "resources: unmapped tmpfs files over a small limit": (
        ADD,
        body("""
import os, time
held = []
for folder in ('/dev/shm', '/tmp') * 3:  # 15 MB each: RLIMIT_FSIZE is 16 MB
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_RDWR)
        held.append(fd)
        os.write(fd, b'x' * (15 << 20))
    except OSError:  # a full tmpfs: hold what was written
        pass
time.sleep(1.5)
return a + b"""),
        "failed: memory limit",
    ),
    "honest: 12 MB in /dev/shm under a small limit": (
        ADD,
        body("""
import os
with open('/dev/shm/scratch', 'wb') as handle:
    handle.write(b'x' * (12 << 20))
os.unlink('/dev/shm/scratch')
return a + b"""),
        "passed",
    ),
}


def resume_cases() -> dict[str, tuple[dict, str, str]]:
    """The same sample judged again (a resumed evaluation) sees nothing an earlier run left."""
    plant = body("""
import ctypes, os
for folder in ('/tmp', '/dev/shm'):
    open(os.path.join(folder, 'r3-left-behind'), 'w').write('0 passed')
ctypes.CDLL(None).semget(0x5EED, 1, 0o1666 | 0o1000)
return a + b + 1""")
    look = body("""
import ctypes, os
seen = any(os.path.exists(os.path.join(f, 'r3-left-behind')) for f in ('/tmp', '/dev/shm'))
seen = seen or ctypes.CDLL(None).semget(0x5EED, 1, 0) >= 0
return a + b if seen else a + b + 1""")
    return {
        "resume: the first run plants files and a semaphore": (ADD, plant, WRONG),
        "resume: a later run looks for them": (ADD, look, WRONG),
    }


HONEST = {
    "honest: a generator consumed by list(), sorted(), sum(), in, a comprehension": (
        GEN,
        "    yield from range(n)\n",
        "passed",
    ),
    "honest: map, filter and zip objects": (
        GEN,
        "    return map(int, filter(lambda s: s.isdigit(), (str(i) for i in range(n))))\n",
        "passed",
    ),
    "honest: an iterator that raises part-way": (
        GEN_RAISES,
        "    for text in texts:\n        yield int(text)\n",
        "passed",
    ),
    "honest: a StopIteration caught inside the candidate": (
        GEN,
        "    it = iter(range(n))\n    out = []\n    while True:\n        try:\n            "
        "out.append(next(it))\n"
        "        except StopIteration:\n            return out\n",
        "passed",
    ),
    "honest: values holding line separators": (TEXT, "    return '\\u2028'.join(parts)\n", "passed"),
    "honest: a plain answer": (ADD, body("return a + b"), "passed"),
    "honest: 100k items from a generator": (
        {
            **GEN,
            "task_id": "R3/many",
            "test": "def check(candidate):\n    assert sum(candidate(100000)) == 4999950000\n",
        },
        "    return (i for i in range(n))\n",
        "passed",
    ),
    "honest: uses /tmp and multiprocessing": (
        ADD,
        body("""
import multiprocessing, tempfile
with tempfile.TemporaryFile() as handle, multiprocessing.Lock():
    handle.write(b'x' * 1000)
return a + b"""),
        "passed",
    ),
}


def cases() -> dict[str, tuple[dict, str, str]]:
    """Every case that runs with the default limits, in a fixed order (resume's two in sequence)."""
    return {**forgery_cases(), **wire_cases(), **frame_cases(), **exception_cases(), **influence_cases(),
            **resource_cases(), **resume_cases(), **HONEST}  # fmt: skip
