/*
 * relayrl_bridge.h - simulator side of the relayrl bridge protocol 1.2 (C11 + POSIX).
 *
 * The protocol is specified in docs/bridge-protocol.md. A trainer (relayrl, Python) creates a
 * channel and launches the simulator with `--memory-path PATH`; this library attaches to it,
 * registers behaviours, publishes decision requests and ended episodes, hands the memory over and
 * waits for the actions.
 *
 * Typical loop:
 *
 *     char err[256];
 *     int reason;
 *     rrb_world *w = rrb_open(rrb_memory_path_from_args(argc, argv), 60.0, &reason, err, sizeof err);
 *     if (!w) { fprintf(stderr, "%s\n", err); return reason == RRB_REASON_VERSION ? 2 : 4; }
 *     int b = rrb_register(w, "walker", 16, 1, &obs_spec, 2, 0, NULL);
 *     for (;;) {
 *         for each agent that needs a decision:
 *             int row = rrb_request_decision(w, b, agent_id, reward);
 *             rrb_set_observation(w, b, row, 0, obs);
 *         int r = rrb_step(w);          // hands over, waits for the trainer's answer
 *         if (r == RRB_OK)    { const float *a = rrb_continuous_actions(w, b); ... }
 *         else if (r == RRB_RESET) { reset the world }
 *         else break;                   // RRB_CLOSED or RRB_ERROR (see rrb_error / rrb_failure)
 *     }
 *     rrb_close(w);
 *
 * Rules of use:
 *  - Every call except rrb_close, rrb_error, rrb_failure, rrb_peer_reason, rrb_keep_alive and
 *    rrb_memory_path_from_args must be made while the simulator owns the memory, i.e. outside
 *    rrb_step (or, for rrb_send only, from inside the message handler).
 *  - The trainer may hold its turn for as long as it likes (learning, evaluating on another
 *    simulator): it proves it is alive with a keep-alive counter, which rrb_step honours (protocol
 *    §4.1). A simulator busy in its own turn for longer than the trainer's timeout (loading a level)
 *    calls rrb_keep_alive now and then.
 *  - A world is not thread-safe; use it from one thread.
 *  - Pointers returned by rrb_observation_ptr, rrb_final_observation_ptr, rrb_continuous_actions
 *    and rrb_discrete_actions point into the shared memory. They stay valid until the next call
 *    to rrb_step, rrb_register, rrb_send or rrb_close (any of which may move the memory).
 *  - The library never installs signal handlers. A write to a FIFO whose reader died is done with
 *    SIGPIPE blocked in the calling thread, so a dead trainer cannot kill the simulator.
 */
#ifndef RELAYRL_BRIDGE_H
#define RELAYRL_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Protocol version implemented by this library. */
#define RRB_PROTOCOL_MAJOR 1
#define RRB_PROTOCOL_MINOR 2

/* Results of rrb_step. */
#define RRB_OK 0     /* the trainer answered: actions are available                       */
#define RRB_RESET 1  /* the trainer asked for a reset: reset the world, request new decisions */
#define RRB_CLOSED 2 /* the trainer closed the channel normally (reason 1)                    */
#define RRB_ERROR -1 /* the channel failed: see rrb_error() and rrb_failure()                 */

/* Close reasons (protocol §6). Values of the header's closed bytes and of rrb_failure(). */
#define RRB_REASON_NONE 0
#define RRB_REASON_NORMAL 1
#define RRB_REASON_VERSION 2   /* protocol major version mismatch                         */
#define RRB_REASON_TIMEOUT 3   /* timed out waiting for the trainer                       */
#define RRB_REASON_PROTOCOL 4  /* corrupt header or body, lost or doubled turn            */
#define RRB_REASON_PEER_DIED 5 /* the trainer process died                                */
/* Not a protocol value: the trainer closed the channel with a reason other than 1
 * (rrb_peer_reason() tells which), or a local failure (out of memory, disk full, ...). */
#define RRB_REASON_PEER_CLOSED 100
#define RRB_REASON_LOCAL 101

/* How the trainer combines a stat's values between two metrics rows (rrb_record_stat; protocol §3.1). */
#define RRB_STAT_AVERAGE 0
#define RRB_STAT_MOST_RECENT 1
#define RRB_STAT_SUM 2
#define RRB_STAT_NAME_MAX 128 /* bytes of a stat's name */

/* Observation dtypes. */
#define RRB_FLOAT32 1
#define RRB_UINT8 2

/* One observation's specification: dtype (RRB_FLOAT32 or RRB_UINT8), rank 1..3 and dims
 * (dims[rank..2] are ignored and written as 0; used dims must be >= 1). */
typedef struct rrb_obs_spec {
    uint8_t dtype;
    uint8_t rank;
    uint32_t dims[3];
} rrb_obs_spec;

typedef struct rrb_world rrb_world;

/*
 * Called for every side-channel record the trainer sent, inside rrb_step, in the order they were
 * received (on normal, reset and query turns). `id` is the 16-byte channel id (UUID in .NET
 * Guid.ToByteArray() order), `payload` is only valid during the call. The handler may call
 * rrb_send (the answer then goes out with the next hand-over, which for a query turn is the
 * query's answer) and nothing else of this library. Return nonzero if the id was recognised;
 * 0 makes the library print a warning (once per id) to stderr and skip the record.
 */
typedef int (*rrb_message_handler)(rrb_world *world, const uint8_t id[16], const uint8_t *payload,
                                   uint32_t len, void *user);

/*
 * Returns PATH from the argument pair `--memory-path PATH` (or `--memory-path=PATH`), or NULL
 * when absent. The returned pointer points into argv.
 */
const char *rrb_memory_path_from_args(int argc, char **argv);

/*
 * Parses `NAME VALUE` or `NAME=VALUE` from argv as a double; returns `fallback` when absent or
 * unparsable. Convenience for options such as `--bridge-timeout`.
 */
double rrb_double_from_args(int argc, char **argv, const char *name, double fallback);

/*
 * Attaches to the channel whose header file is `header_path` (handshake, protocol §5).
 * Waits up to `timeout_s` seconds for the header to appear (attach mode), maps and validates it,
 * writes the simulator's protocol version and process id, compares major versions, opens the
 * FIFOs and maps the current body. `timeout_s` is also the limit of every later wait for the
 * trainer without an answer or a keep-alive from it (it is published in the header, §2); <= 0 means
 * wait forever.
 *
 * Returns NULL on failure with a message in `err` (if non-NULL, truncated to `errlen`) and the
 * close reason in `*reason` (if non-NULL): RRB_REASON_VERSION when the majors differ (the message
 * names both versions; the library has set simulator_closed = 2 and handed over),
 * RRB_REASON_PROTOCOL for a corrupt (simulator_closed = 4 is set, no hand-over) or already
 * attached channel, RRB_REASON_PEER_CLOSED when the trainer had already closed it,
 * RRB_REASON_TIMEOUT when the header never appeared, RRB_REASON_PEER_DIED when the trainer has
 * exited (nobody reads its doorbell; the channel's files are removed), RRB_REASON_LOCAL for a
 * system error. A header with a bad magic number or size, of an attached channel or of a closed
 * one is never written to.
 *
 * The simulator owns the memory after a successful open: register behaviours and request the first
 * decisions, then call rrb_step.
 */
rrb_world *rrb_open(const char *header_path, double timeout_s, int *reason, char *err,
                    size_t errlen);

/*
 * Registers a behaviour (protocol §3.3) and returns its index (0, 1, ... in registration order,
 * kept for the life of the channel), or -1 on error (see rrb_error; the world stays usable for
 * an invalid argument, but not after a failure to grow the body).
 *   name: 1..64 bytes of UTF-8; max_agents N: 1..2^24; n_obs K: 1..16 specs in `obs`;
 *   continuous C: 0..65536; n_branches B: 0..64 with `branches` sizes >= 1; C + B >= 1.
 * Registering a name again with the same specification returns the same index; with a larger
 * max_agents it also grows the behaviour's capacity (rows already requested this turn are kept).
 * Any other difference is an error. Grows the body to a new generation (§7).
 */
int rrb_register(rrb_world *world, const char *name, uint32_t max_agents, int n_obs,
                 const rrb_obs_spec *obs, uint32_t continuous, int n_branches,
                 const uint32_t *branches);

/*
 * Appends a decision request for `agent_id` with the reward since its previous decision.
 * Returns the row (0, 1, ...; the row of the actions that will answer it), or -1 when the
 * behaviour is full (N rows) or invalid. The row's action mask is cleared (all allowed);
 * its observations must be written with rrb_set_observation or rrb_observation_ptr.
 * An agent id must appear at most once per turn in a behaviour's decisions (not checked).
 */
int rrb_request_decision(rrb_world *world, int behaviour, int64_t agent_id, float reward);

/*
 * Many agents at once: appends `count` decision requests (ids and rewards from the arrays) and
 * returns the first of their consecutive rows, or -1 if they do not fit. Masks are cleared; write
 * the observations with rrb_observation_ptr(world, behaviour, first_row, k), which points at
 * `count` consecutive rows of observation k (one memcpy per observation).
 */
int rrb_request_decisions(rrb_world *world, int behaviour, uint32_t count, const int64_t *agent_ids,
                          const float *rewards);

/*
 * Copies observation `k` of decision row `row` from `data` (size_k * item_k bytes: float32 or
 * uint8 items, row-major). Returns 0, or -1 on a bad argument.
 */
int rrb_set_observation(rrb_world *world, int behaviour, int row, int k, const void *data);

/* Pointer to observation `k` of decision row `row` in shared memory (write it in place), or NULL. */
void *rrb_observation_ptr(rrb_world *world, int behaviour, int row, int k);

/*
 * Copies decision row `row`'s action mask: M = sum of branch sizes bytes, branch b's options at
 * M_b..M_b+size_b-1 where M_b = size_0 + ... + size_(b-1) (M_0 = 0), 1 = forbidden, 0 = allowed.
 * The trainer never answers with a forbidden option. Returns 0, or -1 on a bad argument
 * (including a behaviour without discrete branches).
 */
int rrb_set_action_mask(rrb_world *world, int behaviour, int row, const uint8_t *mask);

/*
 * Reports that `agent_id`'s episode ended this turn with its last reward; `interrupted` is 1 when
 * it was cut by a step limit (truncated), 0 when terminal. Returns the termination row, or -1.
 * The final observations must be written with rrb_set_final_observation. The same agent may also
 * request a decision in the same turn (a new episode began).
 */
int rrb_end_episode(rrb_world *world, int behaviour, int64_t agent_id, float reward,
                    int interrupted);

/* Copies final observation `k` of termination row `row` from `data`. Returns 0 or -1. */
int rrb_set_final_observation(rrb_world *world, int behaviour, int row, int k, const void *data);

/* Pointer to final observation `k` of termination row `row` in shared memory, or NULL. */
void *rrb_final_observation_ptr(rrb_world *world, int behaviour, int row, int k);

/*
 * Publishes this turn's decisions, terminations and side-channel records, hands over and waits
 * for the trainer (adaptive spin up to 500 us, then poll the doorbell in slices <= 100 ms; §4). Build with
 * -DRRB_SPIN_MAX_NS=N to change the longest spin (nanoseconds); 0 never spins. Query turns are
 * answered inside (message handler, then hand over again) without returning. Returns:
 *   RRB_OK     the trainer's actions answer the decisions requested before this call
 *              (rrb_decision_count / rrb_continuous_actions / rrb_discrete_actions);
 *   RRB_RESET  the trainer asked for a reset: the actions are void; reset the world and request
 *              fresh decisions (terminations from before the reset are dropped);
 *   RRB_CLOSED the trainer closed normally;
 *   RRB_ERROR  the channel failed (rrb_error, rrb_failure). The library has already set
 *              simulator_closed, rung the doorbell, closed the FIFOs and unmapped; when the
 *              trainer died or timed out it also removed the channel's files.
 * After a call, the decision and termination counts of every behaviour restart at 0.
 */
int rrb_step(rrb_world *world);

/* Number of decisions the last RRB_OK answered for `behaviour` (0 after RRB_RESET), or 0. */
uint32_t rrb_decision_count(const rrb_world *world, int behaviour);

/* Continuous actions of `behaviour` after RRB_OK: row-major [n, C] floats (action j of row i at
 * [i * C + j]), row i answering the i-th decision requested before the step; NULL when C == 0 or on
 * a bad argument. The protocol does not clip: relayrl's training sends values in [-1, 1], a
 * trainer used directly any finite value; clip to the range your simulator accepts. */
const float *rrb_continuous_actions(const rrb_world *world, int behaviour);

/* Discrete actions of `behaviour` after RRB_OK: row-major [n, B] int32 option indices (branch b of
 * row i at [i * B + b]), never an option the row's action mask forbids (masks are binding on the
 * trainer); NULL when B == 0 or on a bad argument. */
const int32_t *rrb_discrete_actions(const rrb_world *world, int behaviour);

/* Installs the side-channel message handler (NULL removes it). */
void rrb_set_message_handler(rrb_world *world, rrb_message_handler handler, void *user);

/*
 * Queues a side-channel record for the next hand-over (protocol §3.1), growing the side-channel
 * region when needed. Returns 0, or -1 on failure (see rrb_error).
 */
int rrb_send(rrb_world *world, const uint8_t id[16], const void *payload, uint32_t len);

/*
 * Sends one value of the named statistic to the trainer with the next hand-over (the stats side
 * channel, protocol §3.1, since 1.2); it appears as `sim/<name>` in the run's metrics. `aggregation`
 * (RRB_STAT_AVERAGE, RRB_STAT_MOST_RECENT or RRB_STAT_SUM) says how the trainer combines the values
 * it gets between two metrics rows; use one aggregation per name. `name`: 1 to RRB_STAT_NAME_MAX
 * bytes of UTF-8 (NUL-terminated); `value`: finite. Returns 0 when queued, 1 when the trainer speaks
 * 1.0 or 1.1 (it takes no stats: nothing is sent), -1 for a bad argument (nothing is sent; see
 * rrb_error: the world stays usable) or a failed world. Same rules of use as rrb_send.
 */
int rrb_record_stat(rrb_world *world, const char *name, float value, int aggregation);

/*
 * Tells the trainer, if it is waiting for this simulator's turn, that the simulator is alive and
 * busy on purpose (protocol §4.1): the trainer restarts its timeout. One atomic add on the header;
 * call it at least every (trainer timeout) / 4 while a turn takes longer than that (every frame of a
 * level load is fine). Any time, from the world's thread; does nothing on a NULL or failed world.
 */
void rrb_keep_alive(rrb_world *world);

/* Last error message ("" if none). Valid until the next call on the world. */
const char *rrb_error(const rrb_world *world);

/* Why the world stopped (RRB_REASON_*), RRB_REASON_NONE while it is usable. */
int rrb_failure(const rrb_world *world);

/* The trainer's close reason as read from the header (0 if it has not closed). */
int rrb_peer_reason(const rrb_world *world);

/*
 * Closes the channel (if still open: sets simulator_closed = 1, rings the doorbell, closes the
 * FIFOs and unmaps) and frees the world. NULL is ignored.
 */
void rrb_close(rrb_world *world);

#ifdef __cplusplus
}
#endif

#endif /* RELAYRL_BRIDGE_H */
