/*
 * relayrl_bridge.c - simulator side of the relayrl bridge protocol 1.2 (C11 + POSIX).
 * See relayrl_bridge.h for the API and docs/bridge-protocol.md for the protocol.
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -c
 */
#include "relayrl_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "relayrl_bridge requires a little-endian host (the protocol is little-endian)"
#endif

/* ---- header layout (protocol §2) ---- */
#define H_MAGIC 0
#define H_TMAJOR 8
#define H_TMINOR 10
#define H_SMAJOR 12
#define H_SMINOR 14
#define H_TURN 16
#define H_RESET 24
#define H_QUERY 25
#define H_TCLOSED 26
#define H_SCLOSED 27
#define H_GEN 28
#define H_S 32
#define H_R 36
#define H_TPID 40
#define H_SPID 44
#define H_TTIMEOUT 48 /* since 1.1: the trainer's wait timeout in ms (0: none) */
#define H_STIMEOUT 52 /* since 1.1: ours                                       */
#define H_TALIVE 56   /* since 1.1: the trainer's keep-alive counter (§4.1)    */
#define H_SALIVE 60   /* since 1.1: ours                                       */
#define HEADER_SIZE 64

static const uint8_t MAGIC[8] = {0x52, 0x4C, 0x52, 0x4C, 0x42, 0x52, 0x44, 0x47}; /* RLRLBRDG */

#ifndef RRB_SPIN_MAX_NS
#define RRB_SPIN_MAX_NS 500000LL /* longest spin before sleeping in poll() (adaptive, see spin_budget_ns); 0: none */
#endif
#define SPIN_MIN_NS 20000LL
#define SLICE_MS 100         /* poll() slice                            */
#define MAX_N (1u << 24)
#define MAX_K 16
#define MAX_B 64
#define MAX_C 65536u
#define NAME_MAX_BYTES 64
#define MAX_WARNED 32
#define STATS_MINOR 2 /* the first trainer minor version that takes stats records (protocol §3.1) */

/* ML-Agents' stats channel, a1d8f7b7-cec8-50f9-b78b-d3e165a78520, in Guid.ToByteArray() order */
static const uint8_t STATS_ID[16] = {0xb7, 0xf7, 0xd8, 0xa1, 0xc8, 0xce, 0xf9, 0x50,
                                     0xb7, 0x8b, 0xd3, 0xe1, 0x65, 0xa7, 0x85, 0x20};

typedef struct layout {
    uint64_t size; /* section size */
    uint64_t dec, dec_obs[MAX_K], dec_rew, dec_ids, dec_mask;
    uint64_t term, term_obs[MAX_K], term_rew, term_int, term_ids;
    uint64_t act_cont, act_disc;
} layout;

typedef struct beh {
    char name[NAME_MAX_BYTES + 1];
    uint32_t N, C, M;
    uint16_t K, B;
    rrb_obs_spec obs[MAX_K];
    uint32_t branches[MAX_B];
    uint64_t obs_bytes[MAX_K]; /* bytes of one row of observation k */
    layout L;
    uint64_t off;              /* section offset from the start of the RL region */
    uint32_t n, m, prev_n;     /* decisions / terminations this turn; decisions answered */
} beh;

struct rrb_world {
    char *path;       /* header path                      */
    char *scratch;    /* buffer for derived paths         */
    size_t scratch_len;
    uint8_t *hdr;     /* mapped header (64 bytes)         */
    uint8_t *body;    /* mapped body                      */
    size_t body_size;
    uint32_t G, S, R;
    int ts_fd, st_fd; /* doorbells: trainer->sim (read), sim->trainer (write) */
    uint64_t turn;    /* last turn value stored or observed */
    double timeout_s;
    uint16_t trainer_minor; /* the trainer's protocol minor version (same major) */
    beh *behs;
    int nbeh;
    uint32_t L_out;   /* outgoing side-channel bytes queued this turn */
    uint8_t *inbox;
    size_t inbox_cap;
    rrb_message_handler handler;
    void *handler_user;
    uint8_t warned[MAX_WARNED][16];
    int nwarned;
    int failure;      /* RRB_REASON_*: why the world stopped */
    int peer_reason;
    int in_handler;
    double wait_avg_ns; /* running mean of recent waits: sets the spin budget */
    char err[512];
};

/* ------------------------------------------------------------------ helpers */

static uint64_t pad8(uint64_t x) { return (x + 7u) & ~(uint64_t)7u; }

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int32_t rdi32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static _Atomic uint64_t *turn_ptr(const rrb_world *w) { return (_Atomic uint64_t *)(void *)(w->hdr + H_TURN); }
static _Atomic uint8_t *byte_ptr(const rrb_world *w, int off) { return (_Atomic uint8_t *)(void *)(w->hdr + off); }
static uint8_t trainer_closed(const rrb_world *w) { return atomic_load_explicit(byte_ptr(w, H_TCLOSED), memory_order_acquire); }
static _Atomic uint32_t *u32_ptr(const rrb_world *w, int off) { return (_Atomic uint32_t *)(void *)(w->hdr + off); }
static uint32_t trainer_alive(const rrb_world *w) { return atomic_load_explicit(u32_ptr(w, H_TALIVE), memory_order_relaxed); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void set_err(rrb_world *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static const char *reason_name(int r) {
    switch (r) {
    case 0: return "open";
    case 1: return "normal close";
    case 2: return "protocol version mismatch";
    case 3: return "timed out waiting for the peer";
    case 4: return "protocol error";
    case 5: return "the peer died";
    default: return "unknown reason";
    }
}

/* Derived path: header path + suffix, in w->scratch. */
static const char *derived(rrb_world *w, const char *suffix) {
    size_t need = strlen(w->path) + strlen(suffix) + 1;
    if (need > w->scratch_len) {
        char *p = realloc(w->scratch, need);
        if (!p) return NULL;
        w->scratch = p;
        w->scratch_len = need;
    }
    snprintf(w->scratch, w->scratch_len, "%s%s", w->path, suffix);
    return w->scratch;
}

static const char *body_path(rrb_world *w, uint32_t g) {
    char suffix[16];
    snprintf(suffix, sizeof suffix, ".%u", (unsigned)g);
    return derived(w, suffix);
}

/* Writes one byte to a doorbell FIFO: non-blocking, EAGAIN ignored, and with SIGPIPE blocked so
 * that a dead reader produces EPIPE instead of killing the process. */
static void ring_fd(int fd) {
    if (fd < 0) return;
    sigset_t block, old, pending;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    sigemptyset(&pending);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    ssize_t r;
    do {
        r = write(fd, "\1", 1);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && errno == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&block, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void unmap_body(rrb_world *w) {
    if (w->body) munmap(w->body, w->body_size);
    w->body = NULL;
    w->body_size = 0;
}

static void remove_files(rrb_world *w) {
    const char *p;
    uint32_t g = w->hdr ? rd32(w->hdr + H_GEN) : 0;
    if (g && (p = body_path(w, g))) unlink(p);
    if (w->G && w->G != g && (p = body_path(w, w->G))) unlink(p);
    if (w->G && (p = body_path(w, w->G + 1))) unlink(p); /* a growth cut short */
    if ((p = derived(w, ".ts"))) unlink(p);
    if ((p = derived(w, ".st"))) unlink(p);
    if ((p = derived(w, ".tmp"))) unlink(p);
    unlink(w->path);
}

/* Stops the world (protocol §6): sets simulator_closed, rings, closes the FIFOs, unmaps; removes
 * the files when the trainer died or timed out. Always returns -1. */
static int fail(rrb_world *w, int reason, const char *fmt, ...) {
    if (w->failure) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->failure = reason;
    uint8_t code;
    switch (reason) {
    case RRB_REASON_PEER_CLOSED: code = RRB_REASON_NORMAL; break;
    case RRB_REASON_LOCAL: code = RRB_REASON_PROTOCOL; break;
    default: code = (uint8_t)reason; break;
    }
    if (w->hdr) {
        uint8_t expect = 0;
        atomic_compare_exchange_strong_explicit(byte_ptr(w, H_SCLOSED), &expect, code,
                                                memory_order_release, memory_order_relaxed);
    }
    ring_fd(w->st_fd);
    if (w->ts_fd >= 0) close(w->ts_fd);
    if (w->st_fd >= 0) close(w->st_fd);
    w->ts_fd = w->st_fd = -1;
    unmap_body(w);
    if (reason == RRB_REASON_TIMEOUT || reason == RRB_REASON_PEER_DIED) remove_files(w);
    if (w->hdr) munmap(w->hdr, HEADER_SIZE);
    w->hdr = NULL;
    return -1;
}

/* ------------------------------------------------------------------ layout */

static void compute_layout(beh *b) {
    layout *L = &b->L;
    uint64_t N = b->N;
    uint64_t p = pad8(80u + 16u * b->K + 4u * b->B);
    L->dec = p;
    p += 8;
    for (int k = 0; k < b->K; k++) {
        L->dec_obs[k] = p;
        p += pad8(N * b->obs_bytes[k]);
    }
    L->dec_rew = p;
    p += pad8(4 * N);
    L->dec_ids = p;
    p += 8 * N;
    L->dec_mask = p;
    p += pad8(N * b->M);
    L->term = p;
    p += 8;
    for (int k = 0; k < b->K; k++) {
        L->term_obs[k] = p;
        p += pad8(N * b->obs_bytes[k]);
    }
    L->term_rew = p;
    p += pad8(4 * N);
    L->term_int = p;
    p += pad8(N);
    L->term_ids = p;
    p += 8 * N;
    L->act_cont = p;
    p += pad8(4 * N * b->C);
    L->act_disc = p;
    p += pad8(4 * N * b->B);
    L->size = p;
}

/* Lays out sections back to back; returns R, or 0 if it does not fit in a u32. */
static uint64_t layout_all(beh *behs, int count) {
    uint64_t off = 8;
    for (int i = 0; i < count; i++) {
        compute_layout(&behs[i]);
        behs[i].off = off;
        off += behs[i].L.size;
        if (off > UINT32_MAX) return 0;
    }
    return off;
}

static void write_spec(uint8_t *sec, const beh *b) {
    memset(sec, 0, b->L.dec);
    wr32(sec + 0, (uint32_t)b->L.size);
    wr32(sec + 4, b->N);
    wr16(sec + 8, b->K);
    wr16(sec + 10, b->B);
    wr32(sec + 12, b->C);
    memcpy(sec + 16, b->name, strlen(b->name));
    for (int k = 0; k < b->K; k++) {
        uint8_t *o = sec + 80 + 16 * k;
        o[0] = b->obs[k].dtype;
        o[1] = b->obs[k].rank;
        for (int d = 0; d < 3; d++) wr32(o + 4 + 4 * d, d < b->obs[k].rank ? b->obs[k].dims[d] : 0);
    }
    for (int j = 0; j < b->B; j++) wr32(sec + 80 + 16 * b->K + 4 * j, b->branches[j]);
}

static uint8_t *section(const rrb_world *w, const beh *b) { return w->body + w->S + b->off; }

/* Grows the body to generation G+1 (protocol §7) with side-channel size new_S and behaviours
 * `nb` (count `nc`; the first w->nbeh correspond to w->behs, possibly with a larger N). Copies the
 * rows that matter. On success, takes ownership of `nb`. */
static int grow(rrb_world *w, uint32_t new_S, beh *nb, int nc) {
    uint64_t R = layout_all(nb, nc);
    if (R == 0 || (uint64_t)new_S + R > (uint64_t)SIZE_MAX) {
        free(nb);
        set_err(w, "bridge body would exceed the protocol's size limits");
        return -1;
    }
    size_t size = (size_t)new_S + (size_t)R;
    uint32_t g = w->G + 1;
    const char *p = body_path(w, g);
    if (!p) {
        free(nb);
        return fail(w, RRB_REASON_LOCAL, "out of memory");
    }
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(nb);
        return fail(w, RRB_REASON_LOCAL, "cannot create bridge body %s: %s", p, strerror(errno));
    }
    int rc = ftruncate(fd, (off_t)size);
    if (rc == 0) {
        int e = posix_fallocate(fd, 0, (off_t)size); /* so a full tmpfs is an error, not SIGBUS */
        if (e != 0 && e != EINVAL && e != EOPNOTSUPP) {
            errno = e;
            rc = -1;
        }
    }
    uint8_t *nbody = rc == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    int saved = errno;
    close(fd);
    if (nbody == MAP_FAILED) {
        unlink(p);
        free(nb);
        return fail(w, RRB_REASON_LOCAL, "cannot size or map bridge body %s: %s", body_path(w, g), strerror(saved));
    }
    /* side channel: the records queued so far this turn */
    wr32(nbody, w->L_out);
    memcpy(nbody + 4, w->body + 4, w->L_out);
    /* RL region */
    uint8_t *rl = nbody + new_S;
    wr32(rl, (uint32_t)nc);
    wr32(rl + 4, 0);
    for (int i = 0; i < nc; i++) {
        beh *b = &nb[i];
        uint8_t *dst = rl + b->off;
        write_spec(dst, b);
        wr32(dst + b->L.dec, b->n);
        wr32(dst + b->L.term, b->m);
        if (i >= w->nbeh) continue;
        const beh *o = &w->behs[i];
        const uint8_t *src = section(w, o);
        uint64_t n = o->n, m = o->m, a = o->n > o->prev_n ? o->n : o->prev_n;
        for (int k = 0; k < b->K; k++) {
            memcpy(dst + b->L.dec_obs[k], src + o->L.dec_obs[k], n * b->obs_bytes[k]);
            memcpy(dst + b->L.term_obs[k], src + o->L.term_obs[k], m * b->obs_bytes[k]);
        }
        memcpy(dst + b->L.dec_rew, src + o->L.dec_rew, 4 * n);
        memcpy(dst + b->L.dec_ids, src + o->L.dec_ids, 8 * n);
        memcpy(dst + b->L.dec_mask, src + o->L.dec_mask, n * b->M);
        memcpy(dst + b->L.term_rew, src + o->L.term_rew, 4 * m);
        memcpy(dst + b->L.term_int, src + o->L.term_int, m);
        memcpy(dst + b->L.term_ids, src + o->L.term_ids, 8 * m);
        memcpy(dst + b->L.act_cont, src + o->L.act_cont, 4 * a * b->C);
        memcpy(dst + b->L.act_disc, src + o->L.act_disc, 4 * a * b->B);
    }
    /* header, then drop the old generation */
    wr32(w->hdr + H_S, new_S);
    wr32(w->hdr + H_R, (uint32_t)R);
    wr32(w->hdr + H_GEN, g);
    unmap_body(w);
    if ((p = body_path(w, w->G))) unlink(p);
    w->body = nbody;
    w->body_size = size;
    w->G = g;
    w->S = new_S;
    w->R = (uint32_t)R;
    free(w->behs);
    w->behs = nb;
    w->nbeh = nc;
    return 0;
}

/* Validates the header fields other than magic and versions; 0 or -1 with w->err set. */
static int check_header_fields(rrb_world *w) {
    uint32_t g = rd32(w->hdr + H_GEN), S = rd32(w->hdr + H_S), R = rd32(w->hdr + H_R);
    if (g < 1 || S < 8 || R < 8 || S % 8 || R % 8) {
        set_err(w, "corrupt bridge header %s: generation %u, S %u, R %u", w->path, (unsigned)g,
                (unsigned)S, (unsigned)R);
        return -1;
    }
    return 0;
}

/* Opens and maps body generation g with size S + R (after validating the file size). */
static int map_body(rrb_world *w, uint32_t g, uint32_t S, uint32_t R, uint8_t **out, int *is_corrupt) {
    *is_corrupt = 0;
    const char *p = body_path(w, g);
    if (!p) return -1;
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        set_err(w, "cannot open bridge body %s: %s", p, strerror(errno));
        *is_corrupt = errno == ENOENT;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        set_err(w, "cannot stat bridge body %s: %s", p, strerror(errno));
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)S + R;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        set_err(w, "corrupt bridge channel: body %s has %lld bytes, header says S + R = %llu", p,
                (long long)st.st_size, (unsigned long long)size);
        *is_corrupt = 1;
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        set_err(w, "cannot map bridge body %s: %s", body_path(w, g), strerror(e));
        return -1;
    }
    *out = m;
    return 0;
}

/* The trainer grew the body (a larger side channel): map the new generation, check the RL
 * region still holds our layout (the trainer copies it verbatim). */
static int follow_generation(rrb_world *w) {
    if (check_header_fields(w) < 0) return fail(w, RRB_REASON_PROTOCOL, "%s", w->err);
    uint32_t g = rd32(w->hdr + H_GEN), S = rd32(w->hdr + H_S), R = rd32(w->hdr + H_R);
    uint8_t *nb;
    int corrupt;
    if (map_body(w, g, S, R, &nb, &corrupt) < 0)
        return fail(w, corrupt ? RRB_REASON_PROTOCOL : RRB_REASON_LOCAL, "%s", w->err);
    uint8_t *rl = nb + S;
    int ok = R == w->R && rd32(rl) == (uint32_t)w->nbeh;
    for (int i = 0; ok && i < w->nbeh; i++) {
        const beh *b = &w->behs[i];
        ok = rd32(rl + b->off) == (uint32_t)b->L.size && rd32(rl + b->off + 4) == b->N;
    }
    if (!ok) {
        munmap(nb, (size_t)S + R);
        return fail(w, RRB_REASON_PROTOCOL,
                    "protocol error: the trainer's body generation %u changed the RL region "
                    "(R %u, expected %u)", (unsigned)g, (unsigned)R, (unsigned)w->R);
    }
    unmap_body(w);
    w->body = nb;
    w->body_size = (size_t)S + R;
    w->G = g;
    w->S = S;
    return 0;
}

/* ------------------------------------------------------------------ turns */

static void drain(int fd) {
    uint8_t buf[256];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r > 0) continue;
        if (r < 0 && errno == EINTR) continue;
        break; /* EAGAIN, EOF or error */
    }
}

/* Waits until `turn` == expected (protocol §4). 0, or -1 after fail(). */
static int wait_turn_inner(rrb_world *w, uint64_t expected);

/* How long to spin before sleeping in poll() (protocol §4, the same rule as the Python side): twice
 * the recent mean wait and at least SPIN_MIN_NS (a fast trainer must not pay a wake-up), only
 * SPIN_MIN_NS for a trainer that usually takes longer than `max_ns` (no core burnt on a slow one),
 * and never more than `max_ns`: built with -DRRB_SPIN_MAX_NS=0, the library never spins. */
static long long spin_budget_ns(double wait_avg_ns, long long max_ns) {
    long long budget = wait_avg_ns > (double)max_ns ? SPIN_MIN_NS : (long long)(2.0 * wait_avg_ns);
    if (budget < SPIN_MIN_NS) budget = SPIN_MIN_NS;
    if (budget > max_ns) budget = max_ns;
    return budget > 0 ? budget : 0;
}

static int wait_turn(rrb_world *w, uint64_t expected) {
    long long start = now_ns();
    int r = wait_turn_inner(w, expected);
    w->wait_avg_ns = 0.8 * w->wait_avg_ns + 0.2 * (double)(now_ns() - start);
    return r;
}

static int wait_turn_inner(rrb_world *w, uint64_t expected) {
    _Atomic uint64_t *tp = turn_ptr(w);
    long long spin_start = now_ns();
    long long budget = spin_budget_ns(w->wait_avg_ns, RRB_SPIN_MAX_NS);
    for (unsigned i = 0;; i++) {
        uint64_t v = atomic_load_explicit(tp, memory_order_acquire);
        if (v == expected) return 0;
        if (v != expected - 1) break; /* reported below */
        if (budget == 0 || ((i & 31u) == 31u && now_ns() - spin_start > budget)) break; /* 0: one look, no spin */
        cpu_relax();
    }
    double start = now_s();  /* the timeout runs from here, or from the trainer's last keep-alive (§4.1) */
    uint32_t alive = trainer_alive(w);
    int hup = 0;
    for (;;) {
        drain(w->ts_fd);
        uint64_t v = atomic_load_explicit(tp, memory_order_acquire);
        if (v == expected) return 0;
        if (v != expected - 1)
            return fail(w, RRB_REASON_PROTOCOL, "protocol error: lost or doubled turn (turn is %llu, expected %llu)",
                        (unsigned long long)v, (unsigned long long)expected);
        uint8_t tc = trainer_closed(w);
        if (tc) {
            w->peer_reason = tc;
            if (tc == RRB_REASON_NORMAL) return fail(w, RRB_REASON_PEER_CLOSED, "the trainer closed the channel");
            return fail(w, RRB_REASON_PEER_CLOSED, "the trainer closed the channel: %s (reason %u)",
                        reason_name(tc), (unsigned)tc);
        }
        if (hup) return fail(w, RRB_REASON_PEER_DIED, "the trainer died (its doorbell FIFO was closed)");
        int32_t pid = rdi32(w->hdr + H_TPID);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
            return fail(w, RRB_REASON_PEER_DIED, "the trainer died (process %d is gone)", (int)pid);
        uint32_t seen = trainer_alive(w);
        if (seen != alive) { /* the trainer holds the turn on purpose and is alive */
            alive = seen;
            start = now_s();
        }
        double waited = now_s() - start;
        int slice = SLICE_MS;
        if (w->timeout_s > 0) {
            if (waited >= w->timeout_s)
                return fail(w, RRB_REASON_TIMEOUT,
                            "timed out after %.1f s waiting for the trainer (no answer and no keep-alive)", waited);
            double left_ms = (w->timeout_s - waited) * 1000.0 + 1.0;
            if (left_ms < slice) slice = (int)left_ms;
        }
        struct pollfd pfd = {.fd = w->ts_fd, .events = POLLIN, .revents = 0};
        int r = poll(&pfd, 1, slice);
        if (r < 0 && errno != EINTR)
            return fail(w, RRB_REASON_LOCAL, "poll on the doorbell failed: %s", strerror(errno));
        if (r > 0 && (pfd.revents & POLLNVAL))
            return fail(w, RRB_REASON_LOCAL, "poll on the doorbell failed: invalid descriptor");
        if (r > 0 && (pfd.revents & (POLLHUP | POLLERR))) hup = 1;
    }
}

static void hand_over(rrb_world *w) {
    w->turn += 1;
    atomic_store_explicit(turn_ptr(w), w->turn, memory_order_release);
    ring_fd(w->st_fd);
}

static void publish(rrb_world *w) {
    wr32(w->body, w->L_out);
    for (int i = 0; i < w->nbeh; i++) {
        beh *b = &w->behs[i];
        uint8_t *sec = section(w, b);
        wr32(sec + b->L.dec, b->n);
        wr32(sec + b->L.dec + 4, 0);
        wr32(sec + b->L.term, b->m);
        wr32(sec + b->L.term + 4, 0);
    }
}

static int known_warned(rrb_world *w, const uint8_t id[16]) {
    for (int i = 0; i < w->nwarned; i++)
        if (memcmp(w->warned[i], id, 16) == 0) return 1;
    if (w->nwarned < MAX_WARNED) memcpy(w->warned[w->nwarned++], id, 16);
    return 0;
}

/* Copies the trainer's side-channel records out of the body (before our answers overwrite them). */
static int take_inbox(rrb_world *w, uint32_t *len) {
    uint32_t L = rd32(w->body);
    if ((uint64_t)L + 4 > w->S)
        return fail(w, RRB_REASON_PROTOCOL, "protocol error: side-channel length %u exceeds S - 4 = %u",
                    (unsigned)L, (unsigned)(w->S - 4));
    if (L > w->inbox_cap) {
        uint8_t *p = realloc(w->inbox, L);
        if (!p) return fail(w, RRB_REASON_LOCAL, "out of memory");
        w->inbox = p;
        w->inbox_cap = L;
    }
    if (L) memcpy(w->inbox, w->body + 4, L);
    /* validate the framing before anybody sees a record */
    for (uint32_t p = 0; p < L;) {
        if (L - p < 20) return fail(w, RRB_REASON_PROTOCOL, "protocol error: truncated side-channel record");
        uint32_t n = rd32(w->inbox + p + 16);
        if (n > L - p - 20)
            return fail(w, RRB_REASON_PROTOCOL, "protocol error: side-channel record of %u bytes overruns the region",
                        (unsigned)n);
        p += 20 + n;
    }
    *len = L;
    w->L_out = 0;
    return 0;
}

static void dispatch_inbox(rrb_world *w, uint32_t L) {
    for (uint32_t p = 0; p < L && !w->failure;) {
        const uint8_t *id = w->inbox + p;
        uint32_t n = rd32(w->inbox + p + 16);
        int handled = 0;
        if (w->handler) {
            w->in_handler = 1;
            handled = w->handler(w, id, w->inbox + p + 20, n, w->handler_user);
            w->in_handler = 0;
        }
        if (!handled && !known_warned(w, id)) {
            fprintf(stderr,
                    "relayrl_bridge: warning: skipping side-channel record(s) for unknown channel "
                    "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
                    id[3], id[2], id[1], id[0], id[5], id[4], id[7], id[6], id[8], id[9], id[10], id[11],
                    id[12], id[13], id[14], id[15]);
        }
        p += 20 + n;
    }
}

/* ------------------------------------------------------------------ public API */

const char *rrb_memory_path_from_args(int argc, char **argv) {
    static const char opt[] = "--memory-path";
    for (int i = 1; i < argc; i++) {
        if (!argv[i]) continue;
        if (strcmp(argv[i], opt) == 0 && i + 1 < argc) return argv[i + 1];
        if (strncmp(argv[i], opt, sizeof opt - 1) == 0 && argv[i][sizeof opt - 1] == '=')
            return argv[i] + sizeof opt;
    }
    return NULL;
}

double rrb_double_from_args(int argc, char **argv, const char *name, double fallback) {
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!argv[i]) continue;
        if (strcmp(argv[i], name) == 0 && i + 1 < argc) v = argv[i + 1];
        else if (strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') v = argv[i] + len + 1;
        if (v) {
            char *end;
            double d = strtod(v, &end);
            return (end != v && *end == '\0') ? d : fallback;
        }
    }
    return fallback;
}

static void open_error(rrb_world *w, int reason, int *reason_out, char *err, size_t errlen) {
    if (reason_out) *reason_out = reason;
    if (err && errlen) snprintf(err, errlen, "%s", w->err);
}

static void free_world(rrb_world *w) {
    if (w->ts_fd >= 0) close(w->ts_fd);
    if (w->st_fd >= 0) close(w->st_fd);
    unmap_body(w);
    if (w->hdr) munmap(w->hdr, HEADER_SIZE);
    free(w->behs);
    free(w->inbox);
    free(w->scratch);
    free(w->path);
    free(w);
}

/* Marks the channel closed with `code` during the handshake and rings the trainer (best effort);
 * hands the turn over too when `give_turn` (the version mismatch case of §5). */
static void close_at_handshake(rrb_world *w, uint8_t code, int give_turn) {
    atomic_store_explicit(byte_ptr(w, H_SCLOSED), code, memory_order_release);
    if (give_turn) hand_over(w);
    else ring_fd(w->st_fd);
    const char *p = derived(w, ".st");
    if (w->st_fd < 0 && p) {
        int fd = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        ring_fd(fd);
        if (fd >= 0) close(fd);
    }
}

rrb_world *rrb_open(const char *header_path, double timeout_s, int *reason, char *err, size_t errlen) {
    if (reason) *reason = RRB_REASON_NONE;
    if (err && errlen) err[0] = '\0';
    rrb_world *w = calloc(1, sizeof *w);
    if (!w || !header_path) {
        if (reason) *reason = RRB_REASON_LOCAL;
        if (err && errlen) snprintf(err, errlen, "%s", w ? "no --memory-path given" : "out of memory");
        free(w);
        return NULL;
    }
    w->ts_fd = w->st_fd = -1;
    w->timeout_s = timeout_s;
    w->path = strdup(header_path);
    if (!w->path) {
        set_err(w, "out of memory");
        goto local;
    }

    /* 1. the header: wait for it to appear (attach mode), map it */
    double start = now_s();
    int fd;
    for (;;) {
        fd = open(w->path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT) break;
        if (timeout_s > 0 && now_s() - start >= timeout_s) {
            set_err(w, "bridge header %s did not appear within %.1f s", w->path, timeout_s);
            open_error(w, RRB_REASON_TIMEOUT, reason, err, errlen);
            free_world(w);
            return NULL;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (fd < 0) {
        set_err(w, "cannot open bridge header %s: %s", w->path, strerror(errno));
        goto local;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != HEADER_SIZE) {
        close(fd);
        set_err(w, "corrupt bridge header %s: not a regular file of %d bytes (pass the --memory-path the trainer gave)",
                w->path, HEADER_SIZE);
        goto protocol;
    }
    void *h = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED) {
        set_err(w, "cannot map bridge header %s: %s", w->path, strerror(errno));
        goto local;
    }
    w->hdr = h;

    /* 2. (§5) A bad magic means this is not a bridge header: never write to it. */
    if (memcmp(w->hdr + H_MAGIC, MAGIC, 8) != 0) {
        set_err(w, "corrupt bridge header %s: bad magic (expected RLRLBRDG; pass the --memory-path the trainer gave)",
                w->path);
        goto protocol;
    }
    /* 3. another simulator's channel, or a trainer that has stopped: leave it alone */
    if (rd16(w->hdr + H_SMAJOR) != 0 || atomic_load_explicit(turn_ptr(w), memory_order_acquire) != 0) {
        set_err(w, "bridge channel %s is already attached (simulator pid %d, turn %llu): one simulator per channel; "
                "start another trainer for this simulator", w->path, (int)rdi32(w->hdr + H_SPID),
                (unsigned long long)atomic_load_explicit(turn_ptr(w), memory_order_relaxed));
        goto protocol;
    }
    uint8_t tc = trainer_closed(w);
    if (tc) {
        set_err(w, "the trainer of %s already closed the channel (%s, reason %u): start the trainer again", w->path,
                reason_name(tc), (unsigned)tc);
        w->peer_reason = tc;
        open_error(w, RRB_REASON_PEER_CLOSED, reason, err, errlen);
        free_world(w);
        return NULL;
    }
    w->turn = 0;

    /* 4. our version and pid (fields every major version shares, §2), then compare majors before reading
     * or writing anything else (§5): the rest of the header is laid out by the trainer's major version */
    uint16_t tmaj = rd16(w->hdr + H_TMAJOR), tmin = rd16(w->hdr + H_TMINOR);
    wr16(w->hdr + H_SMAJOR, RRB_PROTOCOL_MAJOR);
    wr16(w->hdr + H_SMINOR, RRB_PROTOCOL_MINOR);
    int32_t pid = (int32_t)getpid();
    memcpy(w->hdr + H_SPID, &pid, 4);
    if (tmaj != RRB_PROTOCOL_MAJOR) {
        set_err(w, "bridge protocol version mismatch: the trainer speaks %u.%u, this simulator speaks %u.%u: use "
                "relayrl and a simulator SDK of the same major version", (unsigned)tmaj, (unsigned)tmin,
                (unsigned)RRB_PROTOCOL_MAJOR, (unsigned)RRB_PROTOCOL_MINOR);
        close_at_handshake(w, RRB_REASON_VERSION, 1);
        open_error(w, RRB_REASON_VERSION, reason, err, errlen);
        free_world(w);
        return NULL;
    }

    w->trainer_minor = tmin;
    /* our timeout (§2): whole ms rounded up; 0 for none (0, negative, infinite or NaN), at most 2^32 - 1 */
    double ms = timeout_s > 0 && !isinf(timeout_s) ? timeout_s * 1000.0 : 0.0;
    uint32_t ms32 = UINT32_MAX; /* the cap (a finite timeout of ~49.7 days or more) */
    if (ms < 4294967295.0) {
        ms32 = (uint32_t)ms;
        if ((double)ms32 < ms) ms32 += 1; /* at most 2^32 - 1: ms < 2^32 - 1 */
    }
    wr32(w->hdr + H_STIMEOUT, ms32);

    /* 5. the rest of the header and the body (§2): corrupt means close with reason 4, no hand-over */
    int corrupt = 0;
    uint8_t *body = NULL;
    if (check_header_fields(w) < 0) {
        close_at_handshake(w, RRB_REASON_PROTOCOL, 0);
        goto protocol;
    }
    if (map_body(w, rd32(w->hdr + H_GEN), rd32(w->hdr + H_S), rd32(w->hdr + H_R), &body, &corrupt) < 0) {
        if (!corrupt) goto local;
        close_at_handshake(w, RRB_REASON_PROTOCOL, 0); /* missing or wrongly sized body */
        goto protocol;
    }
    w->G = rd32(w->hdr + H_GEN);
    w->S = rd32(w->hdr + H_S);
    w->R = rd32(w->hdr + H_R);
    w->body = body;
    w->body_size = (size_t)w->S + w->R;

    /* 6. FIFOs: our read end first, then the trainer's (§4) */
    const char *p = derived(w, ".ts");
    if (!p || (w->ts_fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
        set_err(w, "cannot open doorbell %s: %s", p ? p : "", strerror(errno));
        close_at_handshake(w, RRB_REASON_PROTOCOL, 0);
        goto protocol;
    }
    p = derived(w, ".st");
    if (p && (w->st_fd = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 && errno == ENXIO) {
        /* nobody reads it, and the trainer opens it before the header appears (§4): the trainer is gone */
        set_err(w, "the trainer of %s has exited (nobody reads its doorbell): start the trainer again", w->path);
        close_at_handshake(w, RRB_REASON_PEER_DIED, 0);
        remove_files(w);
        open_error(w, RRB_REASON_PEER_DIED, reason, err, errlen);
        free_world(w);
        return NULL;
    }
    if (!p || w->st_fd < 0) {
        set_err(w, "cannot open doorbell %s: %s", p ? p : "", strerror(errno));
        close_at_handshake(w, RRB_REASON_PROTOCOL, 0);
        goto protocol;
    }
    /* the creation body holds an empty side channel and no behaviours; start our turn clean */
    w->L_out = 0;
    return w;

protocol:
    open_error(w, RRB_REASON_PROTOCOL, reason, err, errlen);
    free_world(w);
    return NULL;
local:
    open_error(w, RRB_REASON_LOCAL, reason, err, errlen);
    free_world(w);
    return NULL;
}

static int usable(rrb_world *w) {
    if (!w) return 0;
    if (w->failure) {
        return 0;
    }
    return 1;
}

static beh *get_beh(const rrb_world *w, int b) {
    if (!w || w->failure || b < 0 || b >= w->nbeh) return NULL;
    return &w->behs[b];
}

int rrb_register(rrb_world *w, const char *name, uint32_t max_agents, int n_obs, const rrb_obs_spec *obs,
                 uint32_t continuous, int n_branches, const uint32_t *branches) {
    if (!usable(w)) return -1;
    if (w->in_handler) {
        set_err(w, "rrb_register cannot be called from a message handler");
        return -1;
    }
    size_t nl = name ? strlen(name) : 0;
    if (nl < 1 || nl > NAME_MAX_BYTES) {
        set_err(w, "behaviour name must be 1 to 64 bytes");
        return -1;
    }
    if (max_agents < 1 || max_agents > MAX_N || n_obs < 1 || n_obs > MAX_K || !obs || n_branches < 0 ||
        n_branches > MAX_B || continuous > MAX_C || continuous + (uint32_t)n_branches < 1 ||
        (n_branches > 0 && !branches)) {
        set_err(w, "behaviour '%s': need 1 <= N <= 2^24, 1 <= K <= 16, 0 <= B <= 64, 0 <= C <= 65536, C + B >= 1", name);
        return -1;
    }
    beh nbh;
    memset(&nbh, 0, sizeof nbh);
    memcpy(nbh.name, name, nl);
    nbh.N = max_agents;
    nbh.K = (uint16_t)n_obs;
    nbh.B = (uint16_t)n_branches;
    nbh.C = continuous;
    for (int k = 0; k < n_obs; k++) {
        rrb_obs_spec s = obs[k];
        if ((s.dtype != RRB_FLOAT32 && s.dtype != RRB_UINT8) || s.rank < 1 || s.rank > 3) {
            set_err(w, "behaviour '%s': observation %d needs dtype 1 (float32) or 2 (uint8) and rank 1..3", name, k);
            return -1;
        }
        uint64_t size = s.dtype == RRB_FLOAT32 ? 4 : 1;
        for (int d = 0; d < 3; d++) {
            if (d >= s.rank) {
                s.dims[d] = 0;
                continue;
            }
            if (s.dims[d] < 1) {
                set_err(w, "behaviour '%s': observation %d has a zero dimension", name, k);
                return -1;
            }
            size *= s.dims[d];
        }
        if (size > UINT32_MAX) {
            set_err(w, "behaviour '%s': observation %d is too large", name, k);
            return -1;
        }
        nbh.obs[k] = s;
        nbh.obs_bytes[k] = size;
    }
    for (int j = 0; j < n_branches; j++) {
        if (branches[j] < 1) {
            set_err(w, "behaviour '%s': branch %d has size 0", name, j);
            return -1;
        }
        nbh.branches[j] = branches[j];
        nbh.M += branches[j];
    }
    /* already registered? */
    for (int i = 0; i < w->nbeh; i++) {
        beh *o = &w->behs[i];
        if (strcmp(o->name, nbh.name) != 0) continue;
        int same = o->K == nbh.K && o->B == nbh.B && o->C == nbh.C &&
                   memcmp(o->branches, nbh.branches, sizeof nbh.branches) == 0;
        for (int k = 0; same && k < nbh.K; k++)
            same = o->obs[k].dtype == nbh.obs[k].dtype && o->obs[k].rank == nbh.obs[k].rank &&
                   memcmp(o->obs[k].dims, nbh.obs[k].dims, sizeof nbh.obs[k].dims) == 0;
        if (!same) {
            set_err(w, "behaviour '%s' is already registered with a different specification", name);
            return -1;
        }
        if (nbh.N <= o->N) return i;
        beh *nb = malloc(sizeof(beh) * (size_t)w->nbeh);
        if (!nb) return fail(w, RRB_REASON_LOCAL, "out of memory");
        memcpy(nb, w->behs, sizeof(beh) * (size_t)w->nbeh);
        nb[i].N = nbh.N;
        return grow(w, w->S, nb, w->nbeh) < 0 ? -1 : i;
    }
    beh *nb = malloc(sizeof(beh) * ((size_t)w->nbeh + 1));
    if (!nb) return fail(w, RRB_REASON_LOCAL, "out of memory");
    if (w->nbeh) memcpy(nb, w->behs, sizeof(beh) * (size_t)w->nbeh);
    nb[w->nbeh] = nbh;
    int idx = w->nbeh;
    return grow(w, w->S, nb, w->nbeh + 1) < 0 ? -1 : idx;
}

int rrb_request_decision(rrb_world *w, int behaviour, int64_t agent_id, float reward) {
    beh *b = get_beh(w, behaviour);
    if (!b || w->in_handler) return -1;
    if (b->n >= b->N) {
        set_err(w, "behaviour '%s': more than N = %u decisions in one turn", b->name, (unsigned)b->N);
        return -1;
    }
    uint32_t row = b->n++;
    uint8_t *sec = section(w, b);
    memcpy(sec + b->L.dec_rew + 4u * row, &reward, 4);
    memcpy(sec + b->L.dec_ids + 8u * row, &agent_id, 8);
    if (b->M) memset(sec + b->L.dec_mask + (uint64_t)b->M * row, 0, b->M);
    return (int)row;
}

int rrb_request_decisions(rrb_world *w, int behaviour, uint32_t count, const int64_t *agent_ids,
                          const float *rewards) {
    beh *b = get_beh(w, behaviour);
    if (!b || w->in_handler || (count && (!agent_ids || !rewards))) return -1;
    if ((uint64_t)b->n + count > b->N) {
        set_err(w, "behaviour '%s': %u + %u decisions exceed N = %u in one turn", b->name, (unsigned)b->n,
                (unsigned)count, (unsigned)b->N);
        return -1;
    }
    uint32_t row = b->n;
    uint8_t *sec = section(w, b);
    memcpy(sec + b->L.dec_rew + 4u * row, rewards, 4u * (size_t)count);
    memcpy(sec + b->L.dec_ids + 8u * row, agent_ids, 8u * (size_t)count);
    if (b->M) memset(sec + b->L.dec_mask + (uint64_t)b->M * row, 0, (size_t)b->M * count);
    b->n += count;
    return (int)row;
}

void *rrb_observation_ptr(rrb_world *w, int behaviour, int row, int k) {
    beh *b = get_beh(w, behaviour);
    if (!b || row < 0 || (uint32_t)row >= b->n || k < 0 || k >= b->K) return NULL;
    return section(w, b) + b->L.dec_obs[k] + b->obs_bytes[k] * (uint64_t)row;
}

int rrb_set_observation(rrb_world *w, int behaviour, int row, int k, const void *data) {
    void *dst = rrb_observation_ptr(w, behaviour, row, k);
    if (!dst || !data) return -1;
    memcpy(dst, data, w->behs[behaviour].obs_bytes[k]);
    return 0;
}

int rrb_set_action_mask(rrb_world *w, int behaviour, int row, const uint8_t *mask) {
    beh *b = get_beh(w, behaviour);
    if (!b || !mask || b->M == 0 || row < 0 || (uint32_t)row >= b->n) return -1;
    memcpy(section(w, b) + b->L.dec_mask + (uint64_t)b->M * (uint64_t)row, mask, b->M);
    return 0;
}

int rrb_end_episode(rrb_world *w, int behaviour, int64_t agent_id, float reward, int interrupted) {
    beh *b = get_beh(w, behaviour);
    if (!b || w->in_handler) return -1;
    if (b->m >= b->N) {
        set_err(w, "behaviour '%s': more than N = %u ended episodes in one turn", b->name, (unsigned)b->N);
        return -1;
    }
    uint32_t row = b->m++;
    uint8_t *sec = section(w, b);
    memcpy(sec + b->L.term_rew + 4u * row, &reward, 4);
    sec[b->L.term_int + row] = interrupted ? 1 : 0;
    memcpy(sec + b->L.term_ids + 8u * row, &agent_id, 8);
    return (int)row;
}

void *rrb_final_observation_ptr(rrb_world *w, int behaviour, int row, int k) {
    beh *b = get_beh(w, behaviour);
    if (!b || row < 0 || (uint32_t)row >= b->m || k < 0 || k >= b->K) return NULL;
    return section(w, b) + b->L.term_obs[k] + b->obs_bytes[k] * (uint64_t)row;
}

int rrb_set_final_observation(rrb_world *w, int behaviour, int row, int k, const void *data) {
    void *dst = rrb_final_observation_ptr(w, behaviour, row, k);
    if (!dst || !data) return -1;
    memcpy(dst, data, w->behs[behaviour].obs_bytes[k]);
    return 0;
}

int rrb_step(rrb_world *w) {
    if (!w) return RRB_ERROR;
    if (w->failure) return w->failure == RRB_REASON_PEER_CLOSED && w->peer_reason == RRB_REASON_NORMAL ? RRB_CLOSED : RRB_ERROR;
    if (w->in_handler) {
        set_err(w, "rrb_step cannot be called from a message handler");
        return RRB_ERROR;
    }
    publish(w);
    for (;;) {
        hand_over(w);
        if (wait_turn(w, w->turn + 1) < 0) break;
        w->turn += 1;
        uint8_t tc = trainer_closed(w);
        if (tc) {
            w->peer_reason = tc;
            if (tc == RRB_REASON_NORMAL) fail(w, RRB_REASON_PEER_CLOSED, "the trainer closed the channel");
            else fail(w, RRB_REASON_PEER_CLOSED, "the trainer closed the channel: %s (reason %u)", reason_name(tc), (unsigned)tc);
            break;
        }
        if (memcmp(w->hdr + H_MAGIC, MAGIC, 8) != 0) {
            fail(w, RRB_REASON_PROTOCOL, "corrupt bridge header %s: bad magic", w->path);
            break;
        }
        if (rd32(w->hdr + H_GEN) != w->G && follow_generation(w) < 0) break;
        int reset = w->hdr[H_RESET] != 0;
        int query = w->hdr[H_QUERY] != 0;
        if (reset && query) {
            fail(w, RRB_REASON_PROTOCOL, "protocol error: the trainer set both reset and query in one turn (§5 forbids it)");
            break;
        }
        uint32_t L = 0;
        if (take_inbox(w, &L) < 0) break;
        if (query) {
            /* answer the side channel only; the blocks stay as they are */
            w->hdr[H_QUERY] = 0;
            dispatch_inbox(w, L);
            if (w->failure) break;
            wr32(w->body, w->L_out);
            continue;
        }
        w->hdr[H_RESET] = 0;
        w->hdr[H_QUERY] = 0;
        for (int i = 0; i < w->nbeh; i++) w->behs[i].prev_n = reset ? 0 : w->behs[i].n;
        dispatch_inbox(w, L);
        if (w->failure) break;
        for (int i = 0; i < w->nbeh; i++) w->behs[i].n = w->behs[i].m = 0;
        return reset ? RRB_RESET : RRB_OK;
    }
    return w->failure == RRB_REASON_PEER_CLOSED && w->peer_reason == RRB_REASON_NORMAL ? RRB_CLOSED : RRB_ERROR;
}

uint32_t rrb_decision_count(const rrb_world *w, int behaviour) {
    const beh *b = get_beh(w, behaviour);
    return b ? b->prev_n : 0;
}

const float *rrb_continuous_actions(const rrb_world *w, int behaviour) {
    const beh *b = get_beh(w, behaviour);
    if (!b || b->C == 0) return NULL;
    return (const float *)(const void *)(section(w, b) + b->L.act_cont);
}

const int32_t *rrb_discrete_actions(const rrb_world *w, int behaviour) {
    const beh *b = get_beh(w, behaviour);
    if (!b || b->B == 0) return NULL;
    return (const int32_t *)(const void *)(section(w, b) + b->L.act_disc);
}

void rrb_set_message_handler(rrb_world *w, rrb_message_handler handler, void *user) {
    if (!w) return;
    w->handler = handler;
    w->handler_user = user;
}

int rrb_send(rrb_world *w, const uint8_t id[16], const void *payload, uint32_t len) {
    if (!usable(w) || !id || (len && !payload)) return -1;
    uint64_t need = 4 + (uint64_t)w->L_out + 20 + len;
    if (need > w->S) {
        uint64_t L = need - 4;
        uint64_t S2 = pad8(2 * (L + 4));
        if (S2 + w->R > UINT32_MAX) {
            set_err(w, "side-channel message of %u bytes is too large", (unsigned)len);
            return -1;
        }
        beh *nb = malloc(sizeof(beh) * ((size_t)w->nbeh + 1));
        if (!nb) return fail(w, RRB_REASON_LOCAL, "out of memory");
        if (w->nbeh) memcpy(nb, w->behs, sizeof(beh) * (size_t)w->nbeh);
        if (grow(w, (uint32_t)S2, nb, w->nbeh) < 0) return -1;
    }
    uint8_t *p = w->body + 4 + w->L_out;
    memcpy(p, id, 16);
    wr32(p + 16, len);
    if (len) memcpy(p + 20, payload, len);
    w->L_out += 20 + len;
    return 0;
}

/* Whether p[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
static int valid_utf8(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t more;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { more = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { more = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { more = 3; cp = c & 0x07; }
        else return 0;
        if (n - i <= more) return 0;
        for (size_t k = 1; k <= more; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0; /* overlong, surrogate */
        if (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;                /* overlong, too large */
        i += more + 1;
    }
    return 1;
}

int rrb_record_stat(rrb_world *w, const char *name, float value, int aggregation) {
    if (!usable(w)) return -1;
    size_t nl = name ? strlen(name) : 0;
    if (nl < 1 || nl > RRB_STAT_NAME_MAX) {
        set_err(w, "stat name must be 1 to %d bytes of UTF-8, not %u", RRB_STAT_NAME_MAX, (unsigned)nl);
        return -1;
    }
    if (!valid_utf8((const uint8_t *)name, nl)) {
        set_err(w, "stat name of %u bytes is not valid UTF-8", (unsigned)nl);
        return -1;
    }
    if (aggregation != RRB_STAT_AVERAGE && aggregation != RRB_STAT_MOST_RECENT && aggregation != RRB_STAT_SUM) {
        set_err(w, "stat '%s': aggregation %d is not RRB_STAT_AVERAGE, RRB_STAT_MOST_RECENT or RRB_STAT_SUM", name,
                aggregation);
        return -1;
    }
    if (!isfinite(value)) {
        set_err(w, "stat '%s': the value is not finite", name);
        return -1;
    }
    if (w->trainer_minor < STATS_MINOR) return 1; /* a 1.0 or 1.1 trainer takes no stats: nothing is sent */
    uint8_t payload[4 + RRB_STAT_NAME_MAX + 8];
    int32_t k = (int32_t)nl, agg = aggregation;
    memcpy(payload, &k, 4);
    memcpy(payload + 4, name, nl);
    memcpy(payload + 4 + nl, &value, 4);
    memcpy(payload + 8 + nl, &agg, 4);
    return rrb_send(w, STATS_ID, payload, (uint32_t)(nl + 12)) < 0 ? -1 : 0;
}

void rrb_keep_alive(rrb_world *w) {
    if (!w || w->failure || !w->hdr) return;
    atomic_fetch_add_explicit(u32_ptr(w, H_SALIVE), 1u, memory_order_relaxed);
}

const char *rrb_error(const rrb_world *w) { return w ? w->err : "no world"; }

int rrb_failure(const rrb_world *w) { return w ? w->failure : RRB_REASON_LOCAL; }

int rrb_peer_reason(const rrb_world *w) {
    if (!w) return 0;
    if (w->hdr) return trainer_closed(w);
    return w->peer_reason;
}

void rrb_close(rrb_world *w) {
    if (!w) return;
    if (!w->failure && w->hdr) {
        uint8_t expect = 0;
        atomic_compare_exchange_strong_explicit(byte_ptr(w, H_SCLOSED), &expect, RRB_REASON_NORMAL,
                                                memory_order_release, memory_order_relaxed);
        ring_fd(w->st_fd);
    }
    free_world(w);
}
