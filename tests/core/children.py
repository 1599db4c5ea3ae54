"""Small child programs the core tests run under the supervisor (run with
``python3 -c``; stdlib only so they start fast)."""

# Reports every signal it receives as "got N" on stdout, "ready" once its
# handlers are installed; exits 0 on SIGTERM after reporting it, at once: the
# SIGCONT that follows every stop signal (as runit and s6 send it) is then
# never reported after it.
SIGNAL_REPORTER = r"""
import os, signal, sys
skip = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
def handler(signo, frame):
    os.write(1, f"got {signo}\n".encode())
    if signo == signal.SIGTERM:
        os._exit(0)
for s in range(1, 32):
    if s not in skip:
        signal.signal(s, handler)
print("ready", flush=True)
while True:
    signal.pause()
"""

# Ignores SIGTERM and keeps running.
IGNORE_TERM = r"""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)
"""

# Prints its own signal state and open descriptors, then exits.
SELF_REPORT = r"""
import os
fields = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    fields[key] = value.strip()
print("SigBlk", fields["SigBlk"])
print("SigIgn", fields["SigIgn"])
print("fds", " ".join(sorted(os.listdir("/proc/self/fd"), key=int)))
print("cwd", os.getcwd())
"""
