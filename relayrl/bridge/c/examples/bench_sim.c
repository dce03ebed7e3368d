/*
 * bench_sim.c - the simulator of benchmarks/bridge.py: round-trip time of one step.
 *
 *   bench_sim --memory-path PATH [--agents N] [--obs D] [--actions C] [--sleep-after T --sleep S]
 *             [--bridge-timeout SECONDS]
 *   bench_sim --tcp PORT [--agents N] [--obs D] [--actions C]
 *
 * Behaviour "bench": N agents (default 1; ids 1000 + i), one observation float32 (D,) (default 64),
 * C continuous actions (default 4), no discrete branches. Every turn t (0, 1, ...) all N agents
 * request a decision:
 *   write: obs_src[0][0] = t, then one rrb_request_decisions call for all agents (ids and rewards,
 *          two memcpys), then a single memcpy of the prepared [N, D] observation array into the
 *          shared memory (the rows of an observation are contiguous, so rrb_observation_ptr(row 0)
 *          addresses all of them);
 *   step:  rrb_step (hand over, wait for the trainer);
 *   read:  memcpy of the [N, C] actions out of the shared memory into a local array, and a check
 *          that action[0][0] == t (the trainer echoes the turn number: every turn really crossed).
 * With --sleep-after T, the simulator sleeps S seconds after reading turn T's actions, before it
 * writes the next decisions (the trainer waits idle meanwhile).
 *
 * --tcp PORT: the same exchange over a loopback TCP socket instead of the bridge (a parity anchor):
 * connect to 127.0.0.1:PORT with TCP_NODELAY; per turn send ids (int64 [N]), rewards (float32
 * [N]) and obs (float32 [N, D]) with one sendmsg, then read the actions (float32 [N, C]) into the
 * local array and check action[0][0] == t. Stops when the trainer closes the connection.
 *
 * At exit it prints to stderr the turns and the mean nanoseconds per turn of its own work: the
 * request_decision loop, the obs memcpy and the actions memcpy (bridge), or the sendmsg (TCP).
 * Exit codes: 0 trainer closed normally; 2 protocol version mismatch; 3 trainer died or timed
 * out; 4 any other error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../relayrl_bridge.h"

typedef struct bench {
    long n, d, c;
    float *obs, *rewards, *actions;
    int64_t *ids;
    long long turns, rows_ns, obs_ns, send_ns, read_ns;
} bench;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long arg_long(int argc, char **argv, const char *name, long fallback) {
    double v = rrb_double_from_args(argc, argv, name, (double)fallback);
    return (long)v;
}

static void report(const bench *b, const char *mode) {
    double t = b->turns > 0 ? (double)b->turns : 1.0;
    if (b->send_ns)
        fprintf(stderr, "bench_sim %s: agents %ld, turns %lld, sendmsg %.0f ns/turn\n", mode, b->n, b->turns,
                (double)b->send_ns / t);
    else
        fprintf(stderr, "bench_sim %s: agents %ld, turns %lld, request_decision loop %.0f ns/turn, obs memcpy %.0f "
                        "ns/turn, actions memcpy %.0f ns/turn\n",
                mode, b->n, b->turns, (double)b->rows_ns / t, (double)b->obs_ns / t, (double)b->read_ns / t);
}

static int check_echo(const bench *b) {
    if (b->c > 0 && b->actions[0] != (float)b->turns) {
        fprintf(stderr, "bench_sim: turn %lld answered with action[0][0] = %g\n", b->turns, (double)b->actions[0]);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- TCP anchor */

static int read_full(int fd, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r == 0) return 1; /* the trainer closed */
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno == ECONNRESET ? 1 : -1; /* closed with our next turn unread */
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, struct iovec *iov, int count) {
    while (count > 0) {
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)count;
        ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL); /* a closed trainer: EPIPE, not SIGPIPE */
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        size_t left = (size_t)r;
        while (count > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int run_tcp(bench *b, long port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        perror("bench_sim: socket");
        return 4;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        perror("bench_sim: connect");
        close(fd);
        return 4;
    }
    int code = 0;
    for (;;) {
        long long t0 = now_ns();
        b->obs[0] = (float)b->turns;
        struct iovec iov[3] = {{b->ids, sizeof(int64_t) * (size_t)b->n},
                               {b->rewards, sizeof(float) * (size_t)b->n},
                               {b->obs, sizeof(float) * (size_t)(b->n * b->d)}};
        if (write_all(fd, iov, 3) < 0) break; /* the trainer closed */
        long long t1 = now_ns();
        int r = read_full(fd, b->actions, sizeof(float) * (size_t)(b->n * b->c));
        if (r != 0) {
            if (r < 0) code = 4;
            break;
        }
        if (check_echo(b) < 0) {
            code = 4;
            break;
        }
        b->send_ns += t1 - t0;
        b->turns++;
    }
    close(fd);
    report(b, "tcp");
    return code;
}

/* ---------------------------------------------------------------- bridge */

static int exit_code(rrb_world *w) {
    int f = rrb_failure(w);
    if (f == RRB_REASON_TIMEOUT || f == RRB_REASON_PEER_DIED) return 3;
    if (f == RRB_REASON_VERSION) return 2;
    return 4;
}

/* Writes turn b->turns' decision block. 0, or -1 on an error. */
static int produce(rrb_world *w, int beh, bench *b) {
    long long t0 = now_ns();
    b->obs[0] = (float)b->turns;
    if (rrb_request_decisions(w, beh, (uint32_t)b->n, b->ids, b->rewards) != 0) return -1;
    long long t1 = now_ns();
    float *dst = rrb_observation_ptr(w, beh, 0, 0);
    if (!dst) return -1;
    memcpy(dst, b->obs, sizeof(float) * (size_t)(b->n * b->d));
    b->rows_ns += t1 - t0;
    b->obs_ns += now_ns() - t1;
    return 0;
}

static int run_bridge(bench *b, const char *path, double timeout, long sleep_after, double sleep_s) {
    char err[512];
    int reason;
    rrb_world *w = rrb_open(path, timeout, &reason, err, sizeof err);
    if (!w) {
        fprintf(stderr, "bench_sim: %s\n", err);
        if (reason == RRB_REASON_VERSION) return 2;
        if (reason == RRB_REASON_TIMEOUT) return 3;
        return 4;
    }
    rrb_obs_spec spec = {RRB_FLOAT32, 1, {(uint32_t)b->d, 0, 0}};
    int beh = rrb_register(w, "bench", (uint32_t)b->n, 1, &spec, (uint32_t)b->c, 0, NULL);
    int code = 0;
    if (beh < 0 || produce(w, beh, b) < 0) {
        fprintf(stderr, "bench_sim: %s\n", rrb_error(w));
        code = rrb_failure(w) ? exit_code(w) : 4;
        rrb_close(w);
        return code;
    }
    for (;;) {
        int r = rrb_step(w);
        long long t2 = now_ns();
        if (r == RRB_CLOSED) break;
        if (r != RRB_OK) {
            fprintf(stderr, "bench_sim: %s\n", r == RRB_RESET ? "unexpected reset" : rrb_error(w));
            code = r == RRB_RESET ? 4 : exit_code(w);
            break;
        }
        const float *ca = rrb_continuous_actions(w, beh);
        if ((long)rrb_decision_count(w, beh) != b->n || (b->c > 0 && !ca)) {
            fprintf(stderr, "bench_sim: %u actions for %ld decisions\n", (unsigned)rrb_decision_count(w, beh), b->n);
            code = 4;
            break;
        }
        if (b->c > 0) memcpy(b->actions, ca, sizeof(float) * (size_t)(b->n * b->c));
        long long t3 = now_ns();
        if (check_echo(b) < 0) {
            code = 4;
            break;
        }
        if (b->turns == sleep_after) {
            struct timespec ts = {(time_t)sleep_s, (long)((sleep_s - (double)(time_t)sleep_s) * 1e9)};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
            }
        }
        b->turns++;
        b->read_ns += t3 - t2;
        if (produce(w, beh, b) < 0) {
            fprintf(stderr, "bench_sim: %s\n", rrb_error(w));
            code = rrb_failure(w) ? exit_code(w) : 4;
            break;
        }
    }
    rrb_close(w);
    report(b, "bridge");
    return code;
}

int main(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    b.n = arg_long(argc, argv, "--agents", 1);
    b.d = arg_long(argc, argv, "--obs", 64);
    b.c = arg_long(argc, argv, "--actions", 4);
    long port = arg_long(argc, argv, "--tcp", 0);
    const char *path = rrb_memory_path_from_args(argc, argv);
    if (b.n < 1 || b.d < 1 || b.c < 0 || (!path && port <= 0)) {
        fprintf(stderr, "usage: bench_sim (--memory-path PATH | --tcp PORT) [--agents N] [--obs D] [--actions C] "
                        "[--sleep-after T --sleep S] [--bridge-timeout SECONDS]\n");
        return 4;
    }
    b.obs = malloc(sizeof(float) * (size_t)(b.n * b.d));
    b.rewards = malloc(sizeof(float) * (size_t)b.n);
    b.actions = malloc(sizeof(float) * (size_t)(b.n * (b.c > 0 ? b.c : 1)));
    b.ids = malloc(sizeof(int64_t) * (size_t)b.n);
    if (!b.obs || !b.rewards || !b.actions || !b.ids) {
        fprintf(stderr, "bench_sim: out of memory\n");
        return 4;
    }
    for (long i = 0; i < b.n; i++) {
        b.ids[i] = 1000 + i;
        b.rewards[i] = 0.001f * (float)i;
        for (long k = 0; k < b.d; k++) b.obs[i * b.d + k] = (float)(i % 1000) + 0.01f * (float)k;
    }
    memset(b.actions, 0, sizeof(float) * (size_t)(b.n * (b.c > 0 ? b.c : 1)));
    int code;
    if (port > 0) {
        code = run_tcp(&b, port);
    } else {
        long sleep_after = arg_long(argc, argv, "--sleep-after", -1);
        double sleep_s = rrb_double_from_args(argc, argv, "--sleep", 0.0);
        code = run_bridge(&b, path, rrb_double_from_args(argc, argv, "--bridge-timeout", 60.0), sleep_after, sleep_s);
    }
    free(b.obs);
    free(b.rewards);
    free(b.actions);
    free(b.ids);
    return code;
}
