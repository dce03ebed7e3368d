/*
 * echo_sim.c - the bridge conformance simulator (C version; relayrl/bridge/world.py runs the
 * identical scenario in Python, and tests/unit/bridge drive both with the same checks).
 *
 *   echo_sim --memory-path PATH [--bridge-timeout SECONDS]    (default timeout 60 s)
 *
 * Behaviour "echo": N = 8; obs0 float32 (3,), obs1 uint8 (2, 2); C = 2; branches [3, 2].
 * At turn t (turns produced since start or the last reset), agents 100 + i for i in 0..7 with
 * (i + t) % 3 != 0 decide, in ascending i, with
 *   obs0 = [i, t, s_i]   (s_i: sum of agent i's last continuous action, 0 after start/reset)
 *   obs1 = [[i, t % 256], [d0_i, d1_i]]   (last discrete actions, 0 after start/reset)
 *   reward = 0.5 i + t; mask: option i % 3 of branch 0 forbidden.
 * When t % 4 == 3, agent 100 + j, j = (t / 4) % 8, ends its episode: final obs by the same
 * formulas, reward -1, interrupted = (t / 4) % 2 == 1.
 * Behaviour "late" is registered when t == 5 for the first time: N = 4, obs float32 (2,), C = 1,
 * B = 0; agents 0..3 decide every turn from then on with obs [id, t] and reward 0.
 * Every side-channel record is answered on the same channel with its payload reversed.
 * Stats (since 1.2): every turn sends "echo/turn" = t (most recent) and "echo/deciders" = the
 * number of echo agents deciding (sum).
 *
 * Exit codes: 0 trainer closed normally; 2 protocol version mismatch (found by either side); 3
 * trainer died or timed out; 4 any other error (including a trainer that closed with reason 3, 4 or 5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../relayrl_bridge.h"

#define NA 8

typedef struct state {
    long long t;
    float s[NA];
    int32_t d0[NA], d1[NA];
    int echo, late;     /* behaviour indices (late = -1 until registered) */
    int rows[NA], nrows; /* agent index i of each decision row of the last turn */
} state;

static int reverse_echo(rrb_world *w, const uint8_t id[16], const uint8_t *payload, uint32_t len, void *user) {
    (void)user;
    uint8_t *rev = malloc(len ? len : 1);
    if (!rev) return 1;
    for (uint32_t k = 0; k < len; k++) rev[k] = payload[len - 1 - k];
    if (rrb_send(w, id, rev, len) != 0) fprintf(stderr, "echo_sim: cannot answer: %s\n", rrb_error(w));
    free(rev);
    return 1;
}

static void echo_obs(const state *st, int i, float obs0[3], uint8_t obs1[4]) {
    obs0[0] = (float)i;
    obs0[1] = (float)st->t;
    obs0[2] = st->s[i];
    obs1[0] = (uint8_t)i;
    obs1[1] = (uint8_t)(st->t % 256);
    obs1[2] = (uint8_t)st->d0[i];
    obs1[3] = (uint8_t)st->d1[i];
}

/* Writes turn t's decisions and terminations. 0, or -1 on an error. */
static int produce(rrb_world *w, state *st) {
    float obs0[3];
    uint8_t obs1[4];
    if (st->t == 5 && st->late < 0) {
        rrb_obs_spec spec = {RRB_FLOAT32, 1, {2, 0, 0}};
        st->late = rrb_register(w, "late", 4, 1, &spec, 1, 0, NULL);
        if (st->late < 0) return -1;
    }
    st->nrows = 0;
    for (int i = 0; i < NA; i++) {
        if ((i + st->t) % 3 == 0) continue;
        int row = rrb_request_decision(w, st->echo, 100 + i, (float)(0.5 * i + (double)st->t));
        if (row < 0) return -1;
        echo_obs(st, i, obs0, obs1);
        uint8_t mask[5] = {0, 0, 0, 0, 0};
        mask[i % 3] = 1;
        if (rrb_set_observation(w, st->echo, row, 0, obs0) || rrb_set_observation(w, st->echo, row, 1, obs1) ||
            rrb_set_action_mask(w, st->echo, row, mask))
            return -1;
        st->rows[st->nrows++] = i;
    }
    if (st->t % 4 == 3) {
        int j = (int)((st->t / 4) % 8);
        int row = rrb_end_episode(w, st->echo, 100 + j, -1.0f, (st->t / 4) % 2 == 1);
        if (row < 0) return -1;
        echo_obs(st, j, obs0, obs1);
        if (rrb_set_final_observation(w, st->echo, row, 0, obs0) || rrb_set_final_observation(w, st->echo, row, 1, obs1))
            return -1;
    }
    if (st->late >= 0) {
        for (int id = 0; id < 4; id++) {
            int row = rrb_request_decision(w, st->late, id, 0.0f);
            float obs[2] = {(float)id, (float)st->t};
            if (row < 0 || rrb_set_observation(w, st->late, row, 0, obs)) return -1;
        }
    }
    if (rrb_record_stat(w, "echo/turn", (float)st->t, RRB_STAT_MOST_RECENT) < 0 ||
        rrb_record_stat(w, "echo/deciders", (float)st->nrows, RRB_STAT_SUM) < 0)
        return -1;
    return 0;
}

static int exit_code(rrb_world *w) {
    int f = rrb_failure(w);
    if (f == RRB_REASON_TIMEOUT || f == RRB_REASON_PEER_DIED) return 3;
    if (f == RRB_REASON_VERSION || (f == RRB_REASON_PEER_CLOSED && rrb_peer_reason(w) == RRB_REASON_VERSION))
        return 2; /* either side found the mismatch */
    return 4;
}

int main(int argc, char **argv) {
    const char *path = rrb_memory_path_from_args(argc, argv);
    if (!path) {
        fprintf(stderr, "usage: echo_sim --memory-path PATH [--bridge-timeout SECONDS]\n");
        return 4;
    }
    double timeout = rrb_double_from_args(argc, argv, "--bridge-timeout", 60.0);
    char err[512];
    int reason;
    rrb_world *w = rrb_open(path, timeout, &reason, err, sizeof err);
    if (!w) {
        fprintf(stderr, "echo_sim: %s\n", err);
        if (reason == RRB_REASON_VERSION) return 2;
        if (reason == RRB_REASON_TIMEOUT || reason == RRB_REASON_PEER_DIED) return 3;
        return 4;
    }
    rrb_set_message_handler(w, reverse_echo, NULL);
    state st;
    memset(&st, 0, sizeof st);
    st.late = -1;
    rrb_obs_spec obs[2] = {{RRB_FLOAT32, 1, {3, 0, 0}}, {RRB_UINT8, 2, {2, 2, 0}}};
    uint32_t branches[2] = {3, 2};
    st.echo = rrb_register(w, "echo", NA, 2, obs, 2, 2, branches);
    int code = 0;
    if (st.echo < 0 || produce(w, &st) < 0) {
        fprintf(stderr, "echo_sim: %s\n", rrb_error(w));
        code = rrb_failure(w) ? exit_code(w) : 4;
        rrb_close(w);
        return code;
    }
    for (;;) {
        int r = rrb_step(w);
        if (r == RRB_OK) {
            uint32_t n = rrb_decision_count(w, st.echo);
            const float *ca = rrb_continuous_actions(w, st.echo);
            const int32_t *da = rrb_discrete_actions(w, st.echo);
            if (n != (uint32_t)st.nrows) {
                fprintf(stderr, "echo_sim: %u echo actions for %d decisions\n", (unsigned)n, st.nrows);
                code = 4;
                break;
            }
            for (uint32_t r2 = 0; r2 < n; r2++) {
                int i = st.rows[r2];
                st.s[i] = ca[2 * r2] + ca[2 * r2 + 1];
                st.d0[i] = da[2 * r2];
                st.d1[i] = da[2 * r2 + 1];
            }
            st.t += 1;
        } else if (r == RRB_RESET) {
            st.t = 0;
            memset(st.s, 0, sizeof st.s);
            memset(st.d0, 0, sizeof st.d0);
            memset(st.d1, 0, sizeof st.d1);
        } else if (r == RRB_CLOSED) {
            code = 0;
            break;
        } else {
            fprintf(stderr, "echo_sim: %s\n", rrb_error(w));
            code = exit_code(w);
            break;
        }
        if (produce(w, &st) < 0) {
            fprintf(stderr, "echo_sim: %s\n", rrb_error(w));
            code = rrb_failure(w) ? exit_code(w) : 4;
            break;
        }
    }
    rrb_close(w);
    return code;
}
