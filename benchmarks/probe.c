/* The benchmark's workload: one small static-free C program, several roles.
 *
 * Every role reports to the runner over a Unix datagram socket (SOCK), one
 * message per event: "<tag> <CLOCK_MONOTONIC ns> [more]".  CLOCK_MONOTONIC is
 * shared by every PID namespace, so the runner (outside) and the probe (inside
 * the namespace, under the init being measured) read the same clock.
 *
 *   probe exec-stamp SOCK PROG [ARG...]  stamp "exec", then execvp PROG (the init)
 *   probe stamp SOCK                     stamp "start" and exit 0 (start-up)
 *   probe signals SOCK                   stamp "usr1" in a SIGUSR1 handler; exit 0 on SIGTERM
 *   probe wait-exit FIFO SOCK            "ready"; block until a byte arrives on FIFO; stamp "exit"; exit 0
 *   probe term-exit SOCK                 "ready"; stamp "term" and exit 0 on SIGTERM
 *   probe ignore-term SOCK               "ready"; ignore SIGTERM, sleep until killed
 *   probe idle SOCK                      report nothing; exit 0 on SIGTERM (a plan's second process)
 *   probe orphans SOCK OUT N BURST       make N orphans, BURST at a time; write zombie ages (ns) to OUT
 *                                        (a separate observer process watches them being reaped)
 *
 * Only async-signal-safe calls (clock_gettime, sendto, _exit) run in handlers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <poll.h>

static int sock = -1;
static struct sockaddr_un peer;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(111);
}

static void connect_sock(const char *path) {
    sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) die("socket");
    memset(&peer, 0, sizeof peer);
    peer.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof peer.sun_path) {
        fprintf(stderr, "probe: socket path too long\n");
        exit(111);
    }
    strcpy(peer.sun_path, path);
}

/* Signal-safe: formats by hand, no stdio. */
static void send_event(const char *tag, long long ns, long long extra) {
    char buf[96];
    char digits[24];
    int len = 0;
    for (const char *p = tag; *p; p++) buf[len++] = *p;
    long long values[2] = {ns, extra};
    int count = extra >= 0 ? 2 : 1;
    for (int v = 0; v < count; v++) {
        long long x = values[v];
        int n = 0;
        buf[len++] = ' ';
        do {
            digits[n++] = (char)('0' + x % 10);
            x /= 10;
        } while (x > 0);
        while (n > 0) buf[len++] = digits[--n];
    }
    while (sendto(sock, buf, (size_t)len, 0, (struct sockaddr *)&peer, sizeof peer) < 0 && errno == EINTR) {
    }
}

static void on_usr1(int signo) {
    (void)signo;
    send_event("usr1", now_ns(), -1);
}

static void on_term_exit(int signo) {
    (void)signo;
    send_event("term", now_ns(), -1);
    _exit(0);
}

static void on_quiet_exit(int signo) {
    (void)signo;
    _exit(0);
}

static void handle(int signo, void (*fn)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, NULL) < 0) die("sigaction");
}

static void sleep_forever(void) {
    for (;;) pause();
}

struct record {
    long long pid;
    long long exited_ns;
};

static int proc_exists(long long pid) {
    char path[40];
    snprintf(path, sizeof path, "/proc/%lld", pid);
    return access(path, F_OK) == 0;
}

static int count_zombies(void) {
    DIR *dir = opendir("/proc");
    if (!dir) return -1;
    int zombies = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = 0;
        char *close_paren = strrchr(buf, ')');
        if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z') zombies++;
    }
    closedir(dir);
    return zombies;
}

/* One orphan: the intermediate child forks it and exits at once; the orphan
 * waits for its parent to be gone (EOF on a pipe only the parent held open),
 * stamps its exit time into the report pipe, and exits.  From then on it is a
 * zombie of PID 1 until PID 1 reaps it. */
static pid_t make_orphan(int report_fd) {
    pid_t middle = fork();
    if (middle < 0) die("fork");
    if (middle > 0) return middle;
    int gate[2];
    if (pipe(gate) < 0) _exit(112);
    pid_t orphan = fork();
    if (orphan < 0) _exit(113);
    if (orphan == 0) {
        char byte;
        close(gate[1]);
        while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
        }
        struct record rec = {(long long)getpid(), now_ns()};
        if (write(report_fd, &rec, sizeof rec) != sizeof rec) _exit(114);
        _exit(0);
    }
    _exit(0);
}

/* The observer: a process of its own, so that watching never waits for the
 * forking.  It takes each orphan's record as it arrives and checks every
 * pending orphan's /proc entry every 50 µs until PID 1 has reaped it; an
 * orphan still there 10 s after its exit counts as lost.  At EOF on the
 * report pipe (every orphan has exited and the forker is done) it writes the
 * ages, reports "orphans REAPED LOST <ns> ZOMBIES" and exits 0 if all went. */
static int observe(int report_fd, const char *out_path, long total) {
    struct record *pending = calloc((size_t)total, sizeof *pending);
    long long *ages = calloc((size_t)total, sizeof *ages);
    if (!pending || !ages) die("calloc");
    if (fcntl(report_fd, F_SETFL, O_NONBLOCK) < 0) die("fcntl");
    long waiting = 0, reaped = 0, lost = 0;
    int eof = 0;
    struct record buf[64];
    size_t partial = 0;
    struct timespec nap = {0, 50000};
    while (!eof || waiting > 0) {
        for (;;) {
            ssize_t r = read(report_fd, (char *)buf + partial, sizeof buf - partial);
            if (r == 0) {
                eof = 1;
                break;
            }
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN) break;
                die("read report");
            }
            partial += (size_t)r;
            size_t whole = partial / sizeof(struct record);
            for (size_t i = 0; i < whole && waiting < total; i++) pending[waiting++] = buf[i];
            memmove(buf, (char *)buf + whole * sizeof(struct record), partial - whole * sizeof(struct record));
            partial -= whole * sizeof(struct record);
        }
        long long now = now_ns();
        for (long i = 0; i < waiting;) {
            int gone = !proc_exists(pending[i].pid);
            if (gone || now - pending[i].exited_ns > 10000000000LL) {
                if (gone) {
                    long long age = now_ns() - pending[i].exited_ns;
                    ages[reaped++] = age < 0 ? 0 : age;
                } else {
                    lost++;
                }
                pending[i] = pending[--waiting];
                continue;
            }
            i++;
        }
        if (waiting == 0 && !eof) {
            struct pollfd pfd = {report_fd, POLLIN, 0};
            poll(&pfd, 1, -1);  /* nothing to watch: sleep until the next record */
        } else if (waiting > 0) {
            nanosleep(&nap, NULL);
        }
    }
    FILE *out = fopen(out_path, "w");
    if (!out) die(out_path);
    for (long i = 0; i < reaped; i++) fprintf(out, "%lld\n", ages[i]);
    if (fclose(out) != 0) die("fclose");
    int zombies = count_zombies();
    char tag[64];
    snprintf(tag, sizeof tag, "orphans %ld %ld", reaped, lost);
    send_event(tag, now_ns(), zombies < 0 ? 0 : zombies);
    return reaped == total && zombies == 0 ? 0 : 1;
}

/* The forker: BURST orphans at once, a 10 ms pause, and again until TOTAL. */
static int orphans(const char *out_path, long total, long burst) {
    int report[2];
    if (pipe(report) < 0) die("pipe");
    pid_t observer = fork();
    if (observer < 0) die("fork");
    if (observer == 0) {
        close(report[1]);
        _exit(observe(report[0], out_path, total));
    }
    close(report[0]);
    struct timespec pause_between = {0, 10000000};
    for (long made = 0; made < total;) {
        long n = total - made < burst ? total - made : burst;
        for (long i = 0; i < n; i++) {
            pid_t middle = make_orphan(report[1]);
            int status;
            while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
            }
        }
        made += n;
        nanosleep(&pause_between, NULL);
    }
    close(report[1]);  /* the observer sees EOF once the last orphan has exited too */
    int status;
    while (waitpid(observer, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static void usage(void) {
    fprintf(stderr, "usage: probe ROLE SOCK ... (see probe.c)\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 3) usage();
    const char *role = argv[1];
    if (strcmp(role, "exec-stamp") == 0) {
        if (argc < 4) usage();
        connect_sock(argv[2]);
        send_event("exec", now_ns(), -1);
        execvp(argv[3], argv + 3);
        die(argv[3]);
    }
    if (strcmp(role, "wait-exit") == 0) {
        if (argc != 4) usage();
        connect_sock(argv[3]);
        if (mkfifo(argv[2], 0600) < 0 && errno != EEXIST) die(argv[2]);
        send_event("ready", now_ns(), -1);
        int fifo = open(argv[2], O_RDONLY);
        if (fifo < 0) die(argv[2]);
        char byte;
        while (read(fifo, &byte, 1) < 0 && errno == EINTR) {
        }
        send_event("exit", now_ns(), -1);
        _exit(0);
    }
    connect_sock(argv[2]);
    if (strcmp(role, "stamp") == 0) {
        send_event("start", now_ns(), -1);
        return 0;
    }
    if (strcmp(role, "signals") == 0) {
        handle(SIGUSR1, on_usr1);
        handle(SIGTERM, on_term_exit);
        send_event("ready", now_ns(), -1);
        sleep_forever();
    }
    if (strcmp(role, "term-exit") == 0) {
        handle(SIGTERM, on_term_exit);
        send_event("ready", now_ns(), -1);
        sleep_forever();
    }
    if (strcmp(role, "idle") == 0) {
        handle(SIGTERM, on_quiet_exit);
        sleep_forever();
    }
    if (strcmp(role, "ignore-term") == 0) {
        signal(SIGTERM, SIG_IGN);
        send_event("ready", now_ns(), -1);
        sleep_forever();
    }
    if (strcmp(role, "orphans") == 0) {
        if (argc != 6) usage();
        return orphans(argv[3], atol(argv[4]), atol(argv[5]));
    }
    usage();
    return 2;
}
