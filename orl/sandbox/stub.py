"""The stub: trusted code that runs first inside the sandbox, then runs the program.

It is passed to `python -I -u -c`; its arguments are the verdict and nonce fds, and the
job (code, tests, limits, uid) arrives as JSON on stdin (see orl/sandbox/runner.py).
"""

_STUB = r'''
def _orl_main():
    import builtins, ctypes, json, os, resource, sys
    # References taken before the candidate runs: patching os/sys later cannot touch them.
    _write, _read, _exit, _dup2, _open = os.write, os.read, os._exit, os.dup2, os.open
    _str, _type = str, type
    report_fd, nonce_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    job = json.loads(b"".join(chunks))
    _dup2(_open("/dev/null", os.O_RDONLY), 0)  # input() sees end of file
    libc = ctypes.CDLL(None, use_errno=True)

    def fail(message):
        try:
            _write(report_fd, ("failed: " + message.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
        _exit(1)

    # Fallback mode as root, in its own mount namespace: hide the home directories behind
    # empty tmpfs mounts and bind the interpreter back, readable by the sandbox uid. The
    # interpreter dirs are opened first: once hidden, only these handles still reach them.
    handles = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in job["expose"]]
    for hidden in job["hide"]:
        if libc.mount(b"tmpfs", hidden.encode(), b"tmpfs", 0, b"mode=0755,size=1m") != 0:
            fail("sandbox setup: cannot mount tmpfs on %s (errno %d)" % (hidden, ctypes.get_errno()))
    for path, handle in zip(job["expose"], handles):
        os.makedirs(path, mode=0o755, exist_ok=True)
        source = ("/proc/self/fd/%d" % handle).encode()
        if libc.mount(source, path.encode(), None, 0x1000 | 0x4000, None) != 0:  # MS_BIND | MS_REC
            fail("sandbox setup: cannot bind %s (errno %d)" % (path, ctypes.get_errno()))
        os.close(handle)
    if job["uid"] is not None:
        os.setgroups([])
        os.setresgid(job["uid"], job["uid"], job["uid"])
        os.setresuid(job["uid"], job["uid"], job["uid"])
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binaries from here on
    limits = job["limits"]
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_AS", limits["as_bytes"]),
                        ("RLIMIT_FSIZE", limits["fsize_bytes"]), ("RLIMIT_NPROC", limits["nproc"]),
                        ("RLIMIT_CORE", 0)):
        kind = getattr(resource, name)
        ceiling = resource.getrlimit(kind)[1]  # an unprivileged process cannot raise its hard limit
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        hard = value + 1 if name == "RLIMIT_CPU" and ceiling == resource.RLIM_INFINITY else value
        resource.setrlimit(kind, (value, hard))  # for CPU: SIGXCPU at the soft limit, SIGKILL a second later
    os.chdir(job["cwd"])

    namespace = {"__name__": "__orl_candidate__", "__builtins__": builtins}
    try:
        exec(compile(job["code"], "<candidate>", "exec"), namespace)
        if job["test"]:
            exec(compile(job["test"], "<test>", "exec"), namespace)
        if job["entry_point"] is not None:
            namespace["check"](namespace[job["entry_point"]])
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the tests did not finish
        try:
            text = _type(exc).__name__ + ": " + _str(exc)
        except BaseException:
            text = "exception with an unprintable message"
        fail(text)
    # The tests returned: only now fetch the nonce and report it.
    try:
        nonce = _read(nonce_fd, 64)
        _write(report_fd, b"passed " + nonce.strip() + b"\n")
    except BaseException:
        _exit(1)
    _exit(0)


_orl_main()
'''
