/*
 * ball3d.c - a 3DBall-like multi-agent balancing simulator on the relayrl bridge (same dynamics
 * as relayrl/bridge/examples/ball3d.py).
 *
 *   ball3d --memory-path PATH [--agents 12] [--bridge-timeout S] [--seed N] [--step-ms MS] [--groups G]
 *
 * Behaviour "ball3d": N = agents (ids 0..N-1), one observation float32 (6,) =
 * [tilt_x, tilt_z, x, z, vx, vz], C = 2 continuous actions, no discrete branches.
 * Each platform tilts to 0.25 * clip(action, -1, 1) radians per axis (action[0] -> tilt_x drives x,
 * action[1] -> tilt_z drives z); per decision, dt = 0.05, g = 9.81, per axis:
 *   v += g sin(tilt) dt + 0.05 uniform(-1, 1);  p += v dt
 * (the random push is applied with the gravity term, before the position update, as in ball3d.py)
 * Reward +0.1 per step while |x| <= 1 and |z| <= 1. A ball that leaves ends the episode (terminal,
 * reward -1); after 500 steps the episode is cut (interrupted, reward 0.1). An agent whose episode
 * ended starts a new one at once (tilt 0, p ~ U[-0.5, 0.5]^2, v ~ U[-0.3, 0.3]^2) and requests a
 * decision in the same turn. All agents decide every turn. A reset restarts every platform.
 * Every turn it sends the balls that fell as the stat "balls_dropped" (RRB_STAT_SUM: the trainer
 * logs sim/balls_dropped, the drops between two metrics rows).
 * --groups G: G behaviours of N platforms each, "ball3d", "ball3d_1", ... (a scene of several behaviours,
 * each trained with its own policy; ids 0..N-1 in each).
 * --step-ms MS: every step costs MS milliseconds of CPU (a busy wait, like a heavier physics step;
 * benchmarks/bridge_instances.py).
 *
 * Exit codes: 0 trainer closed normally; 2 protocol version mismatch; 3 trainer died or timed
 * out; 4 any other error.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../relayrl_bridge.h"

#define DT 0.05
#define GRAVITY 9.81
#define MAX_TILT 0.25
#define NOISE 0.05
#define MAX_STEPS 500
#define MAX_GROUPS 8

static const uint8_t ENGINE_CONFIG_ID[16] = {0x2c, 0x34, 0x51, 0xe9, 0x7e, 0x4f, 0xea, 0x11,
                                             0xb2, 0x38, 0x78, 0x4f, 0x43, 0x87, 0xd1, 0xf7};
static const uint8_t ENV_PARAMS_ID[16] = {0x1e, 0x89, 0x4c, 0x53, 0x0f, 0x81, 0xea, 0x11,
                                          0xa9, 0xd0, 0x82, 0x24, 0x85, 0x86, 0x04, 0x00};

typedef struct platform {
    double tilt[2], p[2], v[2];
    int steps;
} platform;

static uint64_t rng_state;

static uint64_t splitmix64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(double lo, double hi) {
    return lo + (hi - lo) * ((double)(splitmix64() >> 11) * (1.0 / 9007199254740992.0));
}

static double clip(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

static void restart(platform *pl) {
    pl->tilt[0] = pl->tilt[1] = 0.0;
    for (int a = 0; a < 2; a++) {
        pl->p[a] = uniform(-0.5, 0.5);
        pl->v[a] = uniform(-0.3, 0.3);
    }
    pl->steps = 0;
}

static void observe(const platform *pl, float obs[6]) {
    obs[0] = (float)pl->tilt[0];
    obs[1] = (float)pl->tilt[1];
    obs[2] = (float)pl->p[0];
    obs[3] = (float)pl->p[1];
    obs[4] = (float)pl->v[0];
    obs[5] = (float)pl->v[1];
}

static int decide(rrb_world *w, int b, int id, const platform *pl, float reward) {
    float obs[6];
    int row = rrb_request_decision(w, b, id, reward);
    if (row < 0) return -1;
    observe(pl, obs);
    return rrb_set_observation(w, b, row, 0, obs);
}

/* The built-in channels are accepted silently (this simulator has no screen or parameters). */
static int on_message(rrb_world *w, const uint8_t id[16], const uint8_t *payload, uint32_t len, void *user) {
    (void)w, (void)payload, (void)len, (void)user;
    return memcmp(id, ENGINE_CONFIG_ID, 16) == 0 || memcmp(id, ENV_PARAMS_ID, 16) == 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *path = rrb_memory_path_from_args(argc, argv);
    if (!path) {
        fprintf(stderr, "usage: ball3d --memory-path PATH [--agents 12] [--bridge-timeout S] [--seed N] [--step-ms MS] "
                        "[--groups G]\n");
        return 4;
    }
    double timeout = rrb_double_from_args(argc, argv, "--bridge-timeout", 60.0);
    double agents_d = rrb_double_from_args(argc, argv, "--agents", 12.0);
    double seed_d = rrb_double_from_args(argc, argv, "--seed", 0.0);
    double step_s = rrb_double_from_args(argc, argv, "--step-ms", 0.0) / 1000.0;
    double groups_d = rrb_double_from_args(argc, argv, "--groups", 1.0);
    if (!(groups_d >= 1 && groups_d <= MAX_GROUPS) || groups_d != floor(groups_d)) {
        fprintf(stderr, "ball3d: --groups must be an integer from 1 to %d\n", MAX_GROUPS);
        return 4;
    }
    int groups = (int)groups_d;
    if (!(agents_d >= 1 && agents_d <= 1 << 20) || agents_d != floor(agents_d)) {
        fprintf(stderr, "ball3d: --agents must be a positive integer\n");
        return 4;
    }
    int n = (int)agents_d;
    rng_state = (uint64_t)(int64_t)seed_d ^ 0x5DEECE66Dull;

    char err[512];
    int reason;
    rrb_world *w = rrb_open(path, timeout, &reason, err, sizeof err);
    if (!w) {
        fprintf(stderr, "ball3d: %s\n", err);
        return reason == RRB_REASON_VERSION ? 2 : reason == RRB_REASON_TIMEOUT || reason == RRB_REASON_PEER_DIED ? 3 : 4;
    }
    rrb_set_message_handler(w, on_message, NULL);
    platform *all = calloc((size_t)n * (size_t)groups, sizeof *all);
    rrb_obs_spec spec = {RRB_FLOAT32, 1, {6, 0, 0}};
    int bs[MAX_GROUPS];
    int code = 0;
    for (int g = 0; g < groups; g++) {
        char name[32];
        snprintf(name, sizeof name, g ? "ball3d_%d" : "ball3d", g);
        bs[g] = all ? rrb_register(w, name, (uint32_t)n, 1, &spec, 2, 0, NULL) : -1;
        if (bs[g] < 0) {
            fprintf(stderr, "ball3d: %s\n", all ? rrb_error(w) : "out of memory");
            code = 4;
            goto out;
        }
    }
    for (int g = 0; g < groups; g++)
        for (int i = 0; i < n; i++) {
            restart(&all[g * n + i]);
            if (decide(w, bs[g], i, &all[g * n + i], 0.0f) < 0) goto fail;
        }
    for (;;) {
        int r = rrb_step(w);
        if (r == RRB_CLOSED) break;
        if (r == RRB_ERROR) {
            fprintf(stderr, "ball3d: %s\n", rrb_error(w));
            int f = rrb_failure(w);
            int version = f == RRB_REASON_VERSION || (f == RRB_REASON_PEER_CLOSED && rrb_peer_reason(w) == RRB_REASON_VERSION);
            code = (f == RRB_REASON_TIMEOUT || f == RRB_REASON_PEER_DIED) ? 3 : version ? 2 : 4;
            break;
        }
        if (r == RRB_RESET) {
            for (int g = 0; g < groups; g++)
                for (int i = 0; i < n; i++) {
                    restart(&all[g * n + i]);
                    if (decide(w, bs[g], i, &all[g * n + i], 0.0f) < 0) goto fail;
                }
            continue;
        }
        /* RRB_OK: row i is agent i of each group (all agents decide every turn, in id order) */
        for (int g = 0; g < groups; g++)
            if (rrb_decision_count(w, bs[g]) != (uint32_t)n) {
                fprintf(stderr, "ball3d: %u actions for %d agents\n", (unsigned)rrb_decision_count(w, bs[g]), n);
                code = 4;
                goto out;
            }
        if (step_s > 0) {
            double end = now_s() + step_s;
            while (now_s() < end) {
            }
        }
        int dropped = 0;
        for (int g = 0; g < groups; g++) {
            const float *act = rrb_continuous_actions(w, bs[g]);
            for (int i = 0; i < n; i++) {
                platform *q = &all[g * n + i];
                for (int a = 0; a < 2; a++) {
                    q->tilt[a] = MAX_TILT * clip((double)act[2 * i + a], -1.0, 1.0);
                    q->v[a] += GRAVITY * sin(q->tilt[a]) * DT + NOISE * uniform(-1.0, 1.0);
                    q->p[a] += q->v[a] * DT;
                }
                q->steps += 1;
                dropped += fabs(q->p[0]) > 1.0 || fabs(q->p[1]) > 1.0;
            }
        }
        if (rrb_record_stat(w, "balls_dropped", (float)dropped, RRB_STAT_SUM) < 0) goto fail;
        for (int k = 0; k < groups * n; k++) {
            int g = k / n, i = k % n, b = bs[g];
            platform *q = &all[k];
            int fell = fabs(q->p[0]) > 1.0 || fabs(q->p[1]) > 1.0;
            float reward = 0.1f;
            if (fell || q->steps >= MAX_STEPS) {
                float last[6];
                observe(q, last);
                int row = rrb_end_episode(w, b, i, fell ? -1.0f : 0.1f, fell ? 0 : 1);
                if (row < 0 || rrb_set_final_observation(w, b, row, 0, last) < 0) goto fail;
                restart(q);
                reward = 0.0f;
            }
            if (decide(w, b, i, q, reward) < 0) goto fail;
        }
    }
    goto out;
fail:
    fprintf(stderr, "ball3d: %s\n", rrb_error(w));
    code = 4;
out:
    free(all);
    rrb_close(w);
    return code;
}
