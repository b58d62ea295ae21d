#!/usr/bin/env python3
"""The processes a test run started that are still running: what `.ci/run` checks at its end.

A process counts when it started after the run did (its start time, from /proc, is later than that
of the process given as --since, the CI script itself) and either carries the run's marker in its
environment (--marker NAME=VALUE: `.ci/run` exports it, and every process it starts inherits it), or
runs a program under one of the --exe directories (the build's binaries: a daemon, an MCP server the
daemon starts with a cleared environment; the pinned nats-server), or has a word on its command line
containing one of the --arg strings (a browser's profile directory). This process and its parent
(the CI script) are never counted.

Prints each one (pid and command line) and exits 1 when there is any, 0 when there is none.
"""

import argparse
import os
import sys


def start_time(pid):
    """The process's start, in clock ticks since boot (field 22 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", type=int, required=True, help="the pid of the CI script")
    parser.add_argument("--marker", required=True, help="NAME=VALUE in the run's environment")
    parser.add_argument("--exe", action="append", default=[], help="a directory of the run's programs")
    parser.add_argument("--arg", action="append", default=[], help="a string in the run's command lines")
    args = parser.parse_args()

    since = start_time(args.since)
    mine = {os.getpid(), os.getppid(), args.since}
    marker = args.marker.encode()
    exes = [e.rstrip("/").encode() + b"/" for e in args.exe if e]
    strings = [a.encode() for a in args.arg if a]
    left = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        pid = int(name)
        try:
            if start_time(pid) < since:
                continue
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        cmdline = read(f"/proc/{pid}/cmdline")
        if not cmdline:
            continue  # a zombie or a kernel thread: nothing running
        environ = read(f"/proc/{pid}/environ").split(b"\0")
        words = cmdline.split(b"\0")
        program = os.path.realpath(f"/proc/{pid}/exe").encode() if os.path.exists(f"/proc/{pid}/exe") else words[0]
        runs = any(program.startswith(e) or words[0].startswith(e) for e in exes)
        if marker in environ or runs or any(s in w for w in words for s in strings):
            left.append((pid, cmdline.replace(b"\0", b" ").decode(errors="replace").strip()))
    for pid, cmdline in sorted(left):
        print(f"  still running: {pid} {cmdline[:300]}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
