"""Operating-system containment for a worker that runs untrusted candidate code.

A worker calls :func:`enter_pid_namespace` (freshly forked, single-threaded), then :func:`enter`
before it imports any candidate or task code. Each layer (privileges, filesystem, signals, tcp,
syscalls, processes) is applied on its own and reported in one line; a layer the host lacks is
reported missing, never skipped. docs/evaluation.md says what each one stops. :func:`probe`
says which layers a host offers without applying any to its caller.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import re
import resource
import shutil
import signal
import stat
import struct
import sys
from ctypes import addressof
from dataclasses import dataclass
from functools import cache
from typing import NoReturn

# Landlock (linux/landlock.h); its syscall numbers are the same on every architecture.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3 and 5
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FS_DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # CUDA drives the GPU by ioctl
FS_ON_A_FILE = FS_DEVICE | FS_EXECUTE  # the other rights only make sense on a folder
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
LANDLOCK_LAYERS = ("filesystem", "signals", "tcp")

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
FORWARDED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}  # from the outer process to PID 1

# seccomp: BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
BPF_LD_ABS, BPF_JEQ, BPF_JGE, BPF_AND, BPF_RET = 0x20, 0x15, 0x35, 0x54, 0x06
NR_AT, ARCH_AT, ARG0_AT, ARG1_AT = 0, 4, 16, 24  # the low 32 bits of an argument (little-endian)
RET_KILL_PROCESS, RET_ALLOW, RET_EPERM = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EPERM
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
X32_SYSCALL_BIT = 0x40000000  # x32 calls pass the x86_64 arch check with this bit set
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 10, 16, 2, 5
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS: dict[str, tuple[int | None, int | None]] = {  # name: (x86_64, aarch64)
    "seccomp": (317, 277), "socket": (41, 198), "socketpair": (53, 199),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "io_uring_setup": (425, 425), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "kexec_load": (246, 104),
    "kexec_file_load": (320, 294), "bpf": (321, 280), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "setns": (308, 268), "open_by_handle_at": (304, 265),
    "iopl": (172, None), "ioperm": (173, None), "reboot": (169, 142), "swapon": (167, 224),
    "swapoff": (168, 225), "syslog": (103, 116), "userfaultfd": (323, 282), "connect": (42, 203),
}  # fmt: skip
DENIED = tuple(name for name in SYSCALLS if name not in ("seccomp", "socket", "socketpair", "connect"))

SYSTEM_READABLE = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt", "/proc", "/sys")
ETC_SECRETS = (  # /etc is readable but for these (a Landlock rule grants a whole subtree)
    "shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl/private",
    "pip.conf", "docker", "containerd", "kubernetes", "rancher", "wireguard", "letsencrypt",
    "NetworkManager/system-connections", "ipsec.secrets", "openvpn", "ppp", "security/opasswd",
    "machine-id", "credstore", "credstore.encrypted",
)  # fmt: skip
TOOLS = ("nvcc", "ptxas", "gcc", "g++", "cc", "c++", "ninja")  # compilers a candidate's build runs
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/nvidia*")

ENV_NAMES = frozenset(
    "PATH HOME LANG TZ TERM PYTHONPATH PYTHONHASHSEED VIRTUAL_ENV CONDA_PREFIX LD_LIBRARY_PATH "
    "CUDA_HOME CUDA_PATH CUDA_VISIBLE_DEVICES CUBLAS_WORKSPACE_CONFIG TORCH_CUDA_ARCH_LIST "
    "OMP_NUM_THREADS MKL_NUM_THREADS".split()
)
ENV_PREFIXES = ("LC_", "NVIDIA_", "OPENBLAS_", "TRITON_", "TORCHINDUCTOR_", "KFORGE_")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|AUTH|SESSION", re.IGNORECASE)
URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")  # scheme://user[:pass]@host

_refusal = "enter_pid_namespace was not called"  # why the processes are not contained
_proc_refusal = "not mounted"  # why the namespace has no /proc of its own


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What a contained worker may touch. Paths are taken beneath: a folder grants its subtree."""

    writable: tuple[str, ...]  # the job folder and the cache folders it writes (TMPDIR, Triton, Inductor)
    readable: tuple[str, ...]  # everything else it reads: default_readable() plus any extra
    network: bool = False  # TCP/UDP and connect() allowed; of UNIX sockets, seqpacket ones alone
    devices: tuple[str, ...] = DEVICES  # device files (glob patterns) opened read-write with ioctl


def allowed_env(extra: dict[str, str]) -> dict[str, str]:
    """The parent's variables a worker needs (an allowlist), none that names a secret or holds a
    URL with credentials; then ``extra`` (the caller's own, e.g. HOME=job folder), unfiltered."""
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES))
        and not SECRET_NAME.search(name)
        and not URL_USERINFO.search(value)
    }
    return env | extra


def default_readable() -> tuple[str, ...]:
    """The read-only paths of a Python + torch + CUDA worker: the interpreter and its packages,
    kforge's source, system libraries, CUDA, the compilers on PATH, /etc without its secrets,
    /proc and /sys. Never the home folder, /tmp or /root themselves (only, say, ~/.pyenv)."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    candidates = [
        *(sys.prefix, sys.base_prefix, sys.exec_prefix, package, *sys.path),
        *(os.environ.get(name, "") for name in ("CUDA_HOME", "CUDA_PATH")),
        *os.environ.get("LD_LIBRARY_PATH", "").split(":"),
        *SYSTEM_READABLE,
        *sorted(glob.glob("/usr/local/cuda*") + glob.glob("/run/nvidia*")),
        *_tool_folders(),
        *_beneath_except("/etc", ETC_SECRETS),
    ]
    private = (os.path.expanduser("~"), "/root", "/tmp")
    paths: dict[str, None] = {}
    for path in candidates:
        if not os.path.isabs(path) or not os.path.exists(path):
            continue  # "" in sys.path is the current folder: the job's, which is writable anyway
        for one in (os.path.normpath(path), os.path.realpath(path)):
            if not any(os.path.commonpath([one, p]) == one for p in private):  # never an ancestor
                paths.setdefault(one)
    return tuple(paths)


def _tool_folders() -> list[str]:
    """The folders of the compilers on PATH (their real files: a symlink's folder needs no rule)."""
    found = [os.path.realpath(path) for path in map(shutil.which, TOOLS) if path]
    cuda = [
        os.path.dirname(os.path.dirname(path)) for path in found if path.endswith("/nvcc")
    ]  # include/, nvvm/
    return [os.path.dirname(path) for path in found] + cuda


def _beneath_except(root: str, excluded: tuple[str, ...]) -> list[str]:
    """The entries of ``root`` but the excluded (relative) paths, split where one lies deeper."""
    paths: list[str] = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) and os.access(root, os.R_OK) else []:
        deeper = tuple(e.split("/", 1)[1] for e in excluded if e.startswith(name + "/"))
        if name in excluded:
            continue
        path = os.path.join(root, name)
        paths += _beneath_except(path, deeper) if deeper else [path]
    return paths


def enter(policy: Policy) -> list[str]:
    """Contain this process and everything it starts from now on, one layer at a time; one line
    per layer, active or NOT contained and why. Raises only for a programming error."""
    processes = namespaces_line()  # /proc read before Landlock may hide it
    return [restrict_privileges(), *restrict_filesystem(policy), restrict_syscalls(policy), processes]


def restrict_privileges() -> str:
    """No new privileges (needed by Landlock and seccomp without CAP_SYS_ADMIN), SIGKILL when
    the parent dies. The parent is the *thread* that forked us: fork from a long-lived one."""
    try:
        _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError as err:
        return f"privileges: NOT contained (prctl: {_name(err)})"
    root = "; still root, with root's capabilities" if os.geteuid() == 0 else ""
    return f"privileges: no new privileges, killed with its parent{root}"


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers; OSError (ENOSYS, EOPNOTSUPP) where it offers none."""
    return _syscall(LANDLOCK_CREATE_RULESET, 0, 0, LANDLOCK_CREATE_RULESET_VERSION)


def restrict_filesystem(policy: Policy) -> list[str]:
    """The Landlock layer: filesystem, then scoped signals and abstract sockets, then TCP."""
    threads = len(os.listdir("/proc/self/task")) - 1 if os.path.isdir("/proc/self/task") else 0
    try:
        abi = landlock_abi()
        handled = (1 << 13) - 1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
        handled |= FS_IOCTL_DEV if abi >= 5 else 0
        net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not policy.network else 0
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
        attr = ctypes.create_string_buffer(struct.pack("=QQQ", handled, net, scoped), 24)
        size = 8 if abi < 4 else 16 if abi < 6 else 24  # struct landlock_ruleset_attr of that ABI
        ruleset = _syscall(LANDLOCK_CREATE_RULESET, addressof(attr), size, 0)
    except OSError as err:
        return [f"{layer}: NOT contained (landlock unavailable: {_name(err)})" for layer in LANDLOCK_LAYERS]
    try:
        skipped = _add_rules(ruleset, policy, handled)
        _syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0)
    except OSError as err:
        return [f"{layer}: NOT contained (landlock_restrict_self: {_name(err)})" for layer in LANDLOCK_LAYERS]
    finally:
        os.close(ruleset)
    notes = [f"writes: {', '.join(policy.writable) or 'nothing'}", f"reads: {len(policy.readable)} paths"]
    notes += [f"skipped: {', '.join(skipped)}"] if skipped else []
    notes += [f"NOT covering {threads} threads started before"] if threads else []
    tcp = "allowed by the policy" if policy.network else f"NOT denied by landlock (abi {abi} < 4)"
    return [
        f"filesystem: landlock abi {abi} ({'; '.join(notes)})",
        "signals: landlock scope (no signal or abstract UNIX socket reaches outside the worker)"
        if scoped
        else f"signals: NOT contained (landlock abi {abi} < 6)",
        f"tcp: {'landlock denies bind and connect' if net else tcp}",
    ]


def _add_rules(ruleset: int, policy: Policy, handled: int) -> list[str]:
    """Add every rule; the paths that could not be added (a missing one included), with why."""
    devices = [path for pattern in policy.devices for path in sorted(glob.glob(pattern))]
    rules = [(path, FS_READ) for path in policy.readable]
    rules += [("/dev", FS_READ_DIR)] + [(path, FS_DEVICE) for path in devices]
    rules += [(path, handled) for path in policy.writable]
    # CUDA names its threads through /proc/self/task/TID/comm and fails (error 304) where it cannot.
    rules.append((os.path.realpath("/proc/self") + "/task", FS_READ | FS_WRITE_FILE | FS_TRUNCATE))
    skipped = []
    for path, access in rules:
        fd = -1
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            access &= handled if stat.S_ISDIR(os.fstat(fd).st_mode) else handled & FS_ON_A_FILE
            attr = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
            _syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, addressof(attr), 0)
        except OSError as err:
            skipped.append(f"{path} ({_name(err)})")
        finally:
            if fd >= 0:
                os.close(fd)
    return skipped


def seccomp_program(machine: str, network: bool) -> bytes:
    """The BPF filter: a foreign architecture is killed; EPERM for the denied calls, for connect()
    without ``network``, for socket() but a UNIX stream or seqpacket one (CUDA serves its UVM fds
    on a seqpacket one; with ``network``, where connect() is allowed, that one alone) or TCP/UDP
    with ``network``, and for datagram UNIX sockets (they can sendto() a pathname socket)."""
    numbers = _numbers(machine)

    def op(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jump_true, jump_false, k)

    ok, eperm, load_type = op(BPF_RET, RET_ALLOW), op(BPF_RET, RET_EPERM), op(BPF_LD_ABS, ARG1_AT)
    prog = [op(BPF_LD_ABS, ARCH_AT), op(BPF_JEQ, AUDIT_ARCH[machine], 1), op(BPF_RET, RET_KILL_PROCESS)]
    prog.append(op(BPF_LD_ABS, NR_AT))
    if machine == "x86_64":
        prog += [op(BPF_JGE, X32_SYSCALL_BIT, 0, 1), eperm]
    for name in [*DENIED, *([] if network else ["connect"])]:
        prog += [op(BPF_JEQ, numbers[name], 0, 1), eperm] if name in numbers else []
    not_datagram = [load_type, op(BPF_AND, 0xF), op(BPF_JEQ, SOCK_DGRAM, 0, 1), eperm, ok]
    unix = (
        [load_type, op(BPF_AND, 0xF), op(BPF_JEQ, SOCK_SEQPACKET, 0, 1), ok, eperm]
        if network
        else not_datagram
    )
    socket = [op(BPF_LD_ABS, ARG0_AT), op(BPF_JEQ, AF_UNIX, 0, len(unix)), *unix]
    for family in (AF_INET, AF_INET6, AF_NETLINK) if network else ():
        socket += [op(BPF_JEQ, family, 0, 1), ok]
    pair = [op(BPF_LD_ABS, ARG0_AT), op(BPF_JEQ, AF_UNIX, 1), eperm, *not_datagram]
    prog += [op(BPF_JEQ, numbers["socket"], 0, len(socket) + 1), *socket, eperm]
    prog += [op(BPF_JEQ, numbers["socketpair"], 0, len(pair)), *pair]
    return b"".join([*prog, ok])


def restrict_syscalls(policy: Policy) -> str:
    """The seccomp layer, on every thread of the process (TSYNC)."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return f"syscalls: NOT contained (no seccomp table for {machine})"
    code = seccomp_program(machine, policy.network)
    filters = ctypes.create_string_buffer(code, len(code))
    program = ctypes.create_string_buffer(struct.pack("@HP", len(code) // 8, addressof(filters)))
    seccomp, flags = _numbers(machine)["seccomp"], SECCOMP_FILTER_FLAG_TSYNC
    try:  # 0, or the id of a thread whose own filter kept it from taking this one
        thread = _syscall(seccomp, SECCOMP_SET_MODE_FILTER, flags, addressof(program))
    except OSError as err:
        return f"syscalls: NOT contained (seccomp: {_name(err)})"
    if thread:
        return f"syscalls: NOT contained (seccomp: thread {thread} could not be synchronised)"
    sockets = (
        "UNIX seqpacket and TCP/UDP sockets only" if policy.network else "no connect(), UNIX sockets only"
    )
    return f"syscalls: seccomp ({sockets}; no ptrace, io_uring, keyrings, mounts, modules)"


def enter_pid_namespace() -> str:
    """Put this process's work in new pid, mount and network namespaces (and a user namespace
    when not root), with a /proc of its own; returns the processes line. Call it
    single-threaded, in a freshly forked child.

    The process forks: the outer one waits for the inner, forwards SIGTERM, SIGINT and SIGHUP to
    it and ``os._exit``s with its status (a death by signal as 128 + the signal); it never
    returns. The inner one, PID 1 of the namespace, returns: when it exits, the kernel kills
    every process left in the namespace (a setsid daemon, a double fork). Where unshare is
    refused, nothing forks and the line says why."""
    global _refusal, _proc_refusal
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if uid != 0 else 0)
    try:
        _libc_call("unshare", flags)
        maps = {"setgroups": "deny", "uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
        for name, text in maps.items() if uid != 0 else ():  # the same ids inside: the job stays ours
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError as err:
        _refusal = f"unshare refused: {_name(err)}"
        return namespaces_line()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # held until each side has its handlers
    inner = os.fork()
    if inner:
        _wait_as_outer(inner, mask)
    _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # PID 1 of a namespace ignores the signals it has no handler for, SIGTERM included.
    signal.signal(signal.SIGTERM, lambda number, _frame: os._exit(128 + number))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:  # the host's /proc shows every process (Landlock lets /proc/PID/environ be read)
        _libc_call("mount", None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing here reaches the host
        _libc_call("mount", "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError as err:
        _proc_refusal = f"mount: {_name(err)}"
    return namespaces_line()


def _wait_as_outer(inner: int, mask: set[int | signal.Signals]) -> NoReturn:
    # Hold no pipe the caller waits on (subprocess's exec-error pipe among them).
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for forwarded in FORWARDED:
        signal.signal(forwarded, lambda number, _frame: os.kill(inner, number))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal that came meanwhile is forwarded now
    _, status = os.waitpid(inner, 0)  # retried after each forwarded signal (PEP 475)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def namespaces_line() -> str:
    """Whether this process is PID 1 of its own namespaces (nothing it starts outlives it)."""
    if os.getpid() != 1:
        return f"processes: NOT contained ({_refusal})"
    own = os.path.realpath("/proc/self") == "/proc/1"
    proc = "own /proc" if own else f"the host's /proc ({_proc_refusal})"
    return f"processes: pid, mount and network namespaces (nothing outlives the worker; {proc})"


def probe() -> list[str]:
    """The layers this host offers: a forked child enters them all and reports over a pipe."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        try:
            enter_pid_namespace()
            lines = enter(Policy(writable=(), readable=default_readable()))
        except Exception as err:  # the child's only way to say what broke
            lines = [f"probe failed: {err!r}"]
        os.write(write_end, "\n".join(lines).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    os.waitpid(child, 0)
    return text.splitlines() or ["probe failed: the child reported nothing"]


def _numbers(machine: str) -> dict[str, int]:
    column = 1 if machine == "aarch64" else 0
    return {name: nrs[column] or 0 for name, nrs in SYSCALLS.items() if nrs[column] is not None}


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *args: int) -> int:
    """A raw system call; OSError with the kernel's errno when it fails."""
    return _libc_call("syscall", number, *args)


def _libc_call(name: str, *args: int | str | None) -> int:
    converted = [ctypes.c_ulong(arg) if isinstance(arg, int) else arg and arg.encode() for arg in args]
    result = int(getattr(_libc(), name)(*converted))
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _name(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, str(err))
