"""The adversarial suite (tests/sandbox_attacks.py): every attack is judged failed, in every mode,
and nothing of it is left running or written outside its sandbox.

Each mode runs all its cases at once through check_many (two workers, the peer pairs first so
that each pair runs side by side): a few seconds per mode.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
from pathlib import Path

import pytest

from orl.sandbox import ISOLATION_LABELS, SandboxLimits, check_many, runner
from orl.sandbox.cleanup import PREFIX, owner_tag
from tests.sandbox_attacks import NORMAL, attacks

TIMEOUT_S = 2.0
ROOT = os.geteuid() == 0
BWRAP_PROBLEM = runner.bwrap_problem()
REPO = Path(__file__).resolve().parent.parent

# What the weak fallback ("fallback": no namespaces, the real filesystem) cannot contain.
WEAK_LIMITS = {
    "escape": "the weak fallback shares the machine's filesystem, /tmp, network and process table",
    "peer": "samples of the weak fallback share /tmp, /dev/shm and the process table",
}
WEAK_FORGERY_LIMITS = {  # and without root, not even the verdict: the candidate runs as the harness's user
    "forgery": "the weak fallback without root runs the candidate as the harness's user, "
    "who may ptrace the harness",
}


def _processes_with(needle: bytes, source: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if needle in Path(f"/proc/{name}/{source}").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


def _run_suite(isolation: str, tmp_path: Path) -> dict:
    unique = secrets.token_hex(6)
    canary = REPO / "tests" / f".sandbox_canary_{unique}"
    canary.write_text("must survive\n")
    host_marker = f"orl-attack-{unique}"
    for folder in ("/tmp", "/dev/shm"):
        Path(folder, f"{host_marker}-host").write_text("host file\n")
    problems_file = tmp_path / "problems.jsonl"
    problems_file.write_text('{"task_id": "Attack/add", "test": "assert candidate(1, 2) == 3"}\n')
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.3)
    secret = "orl-test-secret-" + unique
    ctx = {
        "canary": canary, "host_marker": host_marker, "secret": secret, "port": listener.getsockname()[1],
        "sleep_marker": f"{secrets.randbelow(50) + 40}.{secrets.randbelow(10**9):09d}",
        "daemon_marker": f"{secrets.randbelow(50) + 40}.{secrets.randbelow(10**9):09d}",
        "peer_marker": unique, "problems_file": str(problems_file),
        "repo_tasks": str(REPO / "orl" / "tasks" / "tinycode.py"),
    }  # fmt: skip
    cases = {name: (a.problem, a.completion, a.expected, a.kind) for name, a in attacks(ctx).items()}
    cases.update({name: (p, c, e, "normal") for name, (p, c, e) in NORMAL.items()})
    os.environ["ORL_TEST_SECRET"] = secret
    try:
        results = check_many([p for p, _, _, _ in cases.values()], [c for _, c, _, _ in cases.values()],
                             workers=2, progress=False, timeout_s=TIMEOUT_S, isolation=isolation)  # fmt: skip
        try:
            connection, _ = listener.accept()
            connection.close()
            got_connection = True
        except OSError:
            got_connection = False
        return {
            "results": dict(zip(cases, results, strict=True)),
            "expected": {name: expected for name, (_, _, expected, _) in cases.items()},
            "kinds": {name: kind for name, (_, _, _, kind) in cases.items()},
            "canary_alive": canary.exists() and canary.read_text() == "must survive\n",
            "planted": (canary.parent / "planted.txt").exists(),
            "got_connection": got_connection,
            "host_files": [
                f for f in ("/var/tmp", "/run/lock", "/dev/shm", "/tmp") if Path(f, host_marker).exists()
            ],
            "leftover_daemons": _processes_with(ctx["daemon_marker"].encode(), "cmdline"),
            "leftover_sleepers": _processes_with(ctx["sleep_marker"].encode(), "cmdline"),
            "leftover_runs": {
                name: _processes_with(f"ORL_SANDBOX_RUN={r.run_id}".encode(), "environ")
                for name, r in zip(cases, results, strict=True)
            },  # fmt: skip
            "leftover_folders": [
                p for p in os.listdir(tempfile.gettempdir()) if p.startswith(PREFIX + owner_tag())
            ],
        }
    finally:
        os.environ.pop("ORL_TEST_SECRET", None)
        listener.close()
        for path in (canary, canary.parent / "planted.txt", *(Path(f, host_marker) for f in
                     ("/var/tmp", "/run/lock", "/dev/shm", "/tmp")), *(Path(f, f"{host_marker}-host")
                     for f in ("/tmp", "/dev/shm"))):  # fmt: skip
            path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def bwrap_suite(tmp_path_factory):
    if BWRAP_PROBLEM is not None:
        pytest.skip(f"bwrap unusable here: {BWRAP_PROBLEM}")
    return _run_suite("bwrap", tmp_path_factory.mktemp("bwrap"))


@pytest.fixture(scope="module")
def fallback_suite(tmp_path_factory):
    return _run_suite("fallback", tmp_path_factory.mktemp("fallback"))


@pytest.fixture(scope="module")
def weak_suite(tmp_path_factory):
    """The weak fallback, also where namespaces would work (as the machines without them run it)."""
    saved = runner.fallback_label
    runner.fallback_label = lambda: "fallback"
    try:
        problem = runner.weak_fallback_problem()
        if problem is not None:
            pytest.skip(f"the weak fallback cannot run here: {problem}")
        return _run_suite("fallback", tmp_path_factory.mktemp("weak"))
    finally:
        runner.fallback_label = saved


CASE_NAMES = list(
    attacks(
        {
            k: Path("/x") if k == "canary" else "1"
            for k in (
                "canary",
                "host_marker",
                "secret",
                "port",
                "sleep_marker",
                "daemon_marker",
                "peer_marker",
                "problems_file",
                "repo_tasks",
            )
        }
    )
) + list(NORMAL)


def _check_case(suite: dict, name: str, labels: tuple[str, ...]) -> None:
    result = suite["results"][name]
    expected = suite["expected"][name]
    assert result.isolation in labels
    assert result.result.startswith(expected), f"{name}: got {result.result!r}, expected {expected!r}..."
    assert result.passed == (expected == "passed")
    assert result.memory_bound in ("cgroup", "watchdog+tmpfs", "watchdog")
    assert len(result.stdout_tail.encode()) <= SandboxLimits().output_bytes + 4  # utf-8 replacement slack
    assert suite["leftover_runs"][name] == [], f"{name}: processes survived the run"
    assert suite["leftover_folders"] == []
    if name == "deletes and plants files outside its folder":
        assert suite["canary_alive"] and not suite["planted"]
    if name == "connects to a loopback port":
        assert not suite["got_connection"]
    if name.startswith("writes the machine's"):
        assert suite["host_files"] == []
    if name == "leaves a daemon behind":
        assert "spawned" in result.stdout_tail  # it really did start them...
        assert suite["leftover_daemons"] == []  # ...and they were killed with the run
    if name.startswith("peer: runs"):
        assert suite["leftover_sleepers"] == []
    if name == "loops forever":
        assert TIMEOUT_S <= result.duration_s < TIMEOUT_S + 5


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bwrap_judges_right(bwrap_suite, name):
    _check_case(bwrap_suite, name, ("bwrap",))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_fallback_judges_right(fallback_suite, name):
    if fallback_suite["results"][name].isolation == "fallback":
        kind = fallback_suite["kinds"][name]
        if kind in WEAK_LIMITS or (not ROOT and kind in WEAK_FORGERY_LIMITS):
            pytest.skip({**WEAK_LIMITS, **WEAK_FORGERY_LIMITS}[kind])
    _check_case(fallback_suite, name, ISOLATION_LABELS[1:])


@pytest.mark.skipif(
    not ROOT, reason="the weak fallback without root does not hold the verdict (see WEAK_FORGERY_LIMITS)"
)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_weak_fallback_as_root_still_holds_the_verdict(weak_suite, name):
    kind = weak_suite["kinds"][name]
    if kind in WEAK_LIMITS:
        pytest.skip(WEAK_LIMITS[kind])
    _check_case(weak_suite, name, ("fallback",))


def test_attack_count():
    assert len(CASE_NAMES) - len(NORMAL) >= 30
