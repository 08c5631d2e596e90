"""A fork server for Debian's baremetal CLI (python3-ironicclient), for tests.

Each run of the CLI spends about a CPU-second importing openstacksdk,
cliff and the command plugins before it reads its arguments; the tests
run it hundreds of times on a two-core machine. This process imports all
of that once and forks a child per request, which runs the CLI's own
main() exactly as /usr/bin/baremetal does, with the caller's arguments,
environment, working directory and standard streams.

Protocol, on the Unix socket named by argv[1]: the caller sends one
message of JSON {"argv": [...], "env": {...}, "cwd": "..."} carrying its
stdin, stdout and stderr as SCM_RIGHTS descriptors, then reads one line:
the exit status.
"""
import importlib
import importlib.metadata
import json
import os
import signal
import socket
import sys
import traceback

# cliff names the program from sys.argv[0] when it is imported, as
# /usr/bin/baremetal's usage and version lines show it.
SOCKET = sys.argv[1]
PROG = "/usr/bin/baremetal"
sys.argv = [PROG]

import ironicclient.shell  # noqa: E402
import stevedore  # noqa: E402

# The plugins the CLI loads by entry point: its commands, keystoneauth's
# auth types and cliff's output formatters.
for group in ("openstack.baremetal.v1", "keystoneauth1.plugin",
              "cliff.formatter.list", "cliff.formatter.show",
              "cliff.formatter.completion"):
    stevedore.ExtensionManager(group)  # fills stevedore's entry point cache
    for ep in importlib.metadata.entry_points(group=group):
        try:
            importlib.import_module(ep.module)
        except Exception:  # a plugin the CLI would fail on too
            pass


def child(conn):
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    req = json.loads(msg)
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    # Fresh streams on the new descriptors, as a new interpreter has.
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = [PROG] + req["argv"]
    try:
        code = ironicclient.shell.main(req["argv"])
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    conn.sendall(b"%d\n" % code)


def main():
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(SOCKET)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    print("ready", flush=True)
    # A test process that dies without stopping this one (a timeout's
    # panic, a signal) leaves it to init: it then ends itself.
    parent = os.getppid()
    srv.settimeout(2)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            if os.getppid() != parent:
                sys.exit(0)
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                child(conn)
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    main()
