"""The Python floor: the least a PID 1 written in Python does, the yardstick
the supervisor's figures are divided by (not part of the product).

``python floor_init.py PROG [ARG...]``: fork, exec PROG, forward every signal
to it, reap every child, exit with PROG's status (128 + N if signal N killed
it).  Standard library only, one process, no threads.
"""

import os
import signal
import sys

# Raised by a faulting instruction of this process itself; never forwarded.
SYNCHRONOUS = {signal.SIGFPE, signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGTRAP}


def main(argv: list[str]) -> int:
    # Blocked before the fork, so none is lost; sigwaitinfo takes them one by one.
    caught = signal.valid_signals() - SYNCHRONOUS - {signal.SIGKILL, signal.SIGSTOP}
    signal.pthread_sigmask(signal.SIG_BLOCK, caught)
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"floor_init: {argv[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    while True:
        number = signal.sigwaitinfo(caught).si_signo
        if number != signal.SIGCHLD:
            os.kill(child, number)
            continue
        while (reaped := os.waitpid(-1, os.WNOHANG))[0] > 0:  # signals coalesce: reap all
            if reaped[0] == child:
                code = os.waitstatus_to_exitcode(reaped[1])
                return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
