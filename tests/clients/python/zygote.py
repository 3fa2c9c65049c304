"""Starts trainer scripts by forking a process that has already imported the framework.

A shim test starts hundreds of trainers, and each one importing PyTorch costs seconds of CPU
on a two-core machine: most of a test's time went there. The zygote imports the heavy modules
once; each trainer is a fork of it that then runs its script as `python script.py args`
would (argv, environment, working directory, stdout and stderr into the caller's pipe), and
imports gcagent itself, so nothing of the package under test is shared. The framework is the
real one: only its import is shared.

    server:  python zygote.py SOCKET MODULE...
    client:  Zygote(python).start(argv, env) -> a Popen-like process
"""

import array
import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PR_SET_PDEATHSIG = 1


def _die_with_parent(signum):
    try:
        import ctypes
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):
        pass


def _recv_request(conn):
    """One request: a JSON line and the descriptor for stdout and stderr."""
    fds = array.array("i")
    data = b""
    while not data.endswith(b"\n"):
        msg, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_LEN(fds.itemsize))
        if not msg:
            return None, None
        data += msg
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), fds[0]


def _run_child(request, out_fd):
    """In the forked child: becomes `python argv[0] argv[1:]` and never returns."""
    code = 1
    try:
        _die_with_parent(signal.SIGKILL)
        # A fresh interpreter's dispositions (SIGPIPE stays ignored, as Python leaves it).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = extra
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a script's uncaught exception, as python reports it
            traceback.print_exc()
            code = 1
        threading._shutdown()  # as the interpreter's exit: wait for the script's threads,
        atexit._run_exitfuncs()  # then its exit functions
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(path, modules):
    _die_with_parent(signal.SIGTERM)
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = {}  # pid -> the connection that asked for it
    print("ready", flush=True)
    while True:
        try:
            readable, _, _ = select.select([server, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is not None:
                    try:
                        conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                    except OSError:
                        pass
                    conn.close()
        if server in readable:
            conn, _ = server.accept()
            request, out_fd = _recv_request(conn)
            if request is None:
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                server.close()
                os.close(wake_r)
                os.close(wake_w)
                for other in children.values():
                    other.close()
                conn.close()
                _run_child(request, out_fd)
            os.close(out_fd)
            children[pid] = conn
            conn.sendall(f"pid {pid}\n".encode())


class ZygoteProcess:
    """What the tests use of subprocess.Popen (text stdout, stderr merged into it)."""

    def __init__(self, socket_path, argv, env, cwd):
        self.args = argv
        read_fd, write_fd = os.pipe()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(socket_path)
        request = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd}).encode() + b"\n"
        self._conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [write_fd]))])
        os.close(write_fd)
        self._buffer = b""
        first = self._line(None).split()
        assert first and first[0] == "pid", f"the zygote did not start {argv}: {first}"
        self.pid = int(first[1])
        self.stdout = os.fdopen(read_fd, "r")
        self.returncode = None
        self._output = None
        self._reader = None

    def _line(self, timeout):
        """The zygote's next line about this trainer ("pid N", "exit CODE"); None when none
        came within `timeout` (None: wait), "" when the zygote is gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return None
            data = self._conn.recv(4096)
            if not data:
                return ""
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def _status(self, timeout):
        if self.returncode is None:
            line = self._line(timeout)
            if line is not None:
                words = line.split()
                # A zygote that died took its trainers with it (they die with their parent).
                self.returncode = int(words[1]) if len(words) == 2 and words[0] == "exit" else -signal.SIGKILL
                self._conn.close()
        return self.returncode

    def poll(self):
        return self._status(0)

    def wait(self, timeout=None):
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout=None):
        """The rest of the output once the trainer exited (TimeoutExpired, as Popen, if not
        within `timeout`; a later call after kill() returns what was read)."""
        if self._reader is None:
            self._output = []
            self._reader = threading.Thread(target=lambda: self._output.append(self.stdout.read()), daemon=True)
            self._reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
        if self._reader.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return "".join(self._output), None

    def send_signal(self, signum):
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class Zygote:
    """One zygote per Python executable, started at first use and stopped at exit."""

    _running = {}

    def __init__(self, python, modules):
        self.dir = tempfile.mkdtemp(prefix="gcazygote-")
        self.path = os.path.join(self.dir, "zygote.sock")
        self.proc = subprocess.Popen([python, __file__, self.path, *modules], stdout=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: _die_with_parent(signal.SIGTERM))
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"the zygote did not start: {line!r}"
        atexit.register(self.stop)

    @classmethod
    def of(cls, python, modules):
        if python not in cls._running:
            cls._running[python] = cls(python, modules)
        return cls._running[python]

    def start(self, argv, env, cwd=None):
        return ZygoteProcess(self.path, argv, env, cwd or os.getcwd())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
