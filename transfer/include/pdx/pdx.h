/* pdx C API: the transfer core (pdx::Agent) behind opaque handles, for engines written in C or
 * loaded through an FFI. Every call maps onto one pdx::Agent method; see docs/transfer.md.
 *
 * Conventions
 * - Functions return pdx_status_t; its values equal pdx::Status (0 = PDX_OK).
 * - On an error the message is kept per thread: pdx_last_error() returns the message of the
 *   most recent failing call made by the calling thread (valid until that thread's next failing
 *   call). Successful calls leave it untouched.
 * - Handles: pdx_agent_t* (opaque), peers and transfers are uint64_t (0 = none, never reused),
 *   regions and layouts are uint32_t.
 * - Deadlines and TTLs are relative, in milliseconds. deadline_ms = PDX_DEADLINE_DEFAULT: the
 *   agent's default (pdx_config_t::default_deadline_ms, PDX_DEFAULT_DEADLINE_MS unless set);
 *   deadline_ms = 0: already expired (the transfer is accepted and ends PDX_EXPIRED at once,
 *   nothing is moved). ttl_ms = 0 is refused: PDX_INVALID, and pdx_renew_many renews nothing.
 * - Every function is thread-safe for the same agent, except pdx_agent_destroy.
 */
#ifndef PDX_PDX_H
#define PDX_PDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pdx_status {
    PDX_OK = 0,
    PDX_IN_PROGRESS = 1, /* transfer posted, not terminal yet */
    PDX_PEER_GONE = 2,   /* terminal: peer died, was removed or replaced */
    PDX_EXPIRED = 3,     /* terminal: deadline passed */
    PDX_CANCELED = 4,    /* terminal: pdx_cancel() */
    PDX_FAILED = 5,      /* terminal: backend error (also: C API internal error) */
    PDX_INVALID = 6,     /* refused: empty, out of range, mismatched, bad blob, small buffer... */
    PDX_NOT_FOUND = 7,   /* unknown or stale handle / id */
    PDX_BUSY = 8,        /* refused: region leased or in flight */
    PDX_UNSUPPORTED = 9  /* backend not built in */
} pdx_status_t;

typedef enum pdx_backend { PDX_BACKEND_UCX = 0, PDX_BACKEND_LOOPBACK = 1 } pdx_backend_t;
typedef enum pdx_progress { PDX_PROGRESS_THREAD = 0, PDX_PROGRESS_EVENTFD = 1 } pdx_progress_t;
typedef enum pdx_error_mode {
    PDX_ERROR_MODE_AUTO = 0,
    PDX_ERROR_MODE_PEER = 1,
    PDX_ERROR_MODE_NONE = 2
} pdx_error_mode_t;
/* How writes move over UCX (see pdx::WriteProtocol): AUTO = active messages on tcp-only
 * connections, puts elsewhere. */
typedef enum pdx_write_protocol {
    PDX_WRITE_PROTOCOL_AUTO = 0,
    PDX_WRITE_PROTOCOL_RMA = 1,
    PDX_WRITE_PROTOCOL_AM = 2
} pdx_write_protocol_t;
typedef enum pdx_notify_kind {
    PDX_NOTIFY_DONE = 1,
    PDX_NOTIFY_FAILED = 2,
    PDX_NOTIFY_REGISTER = 3,
    PDX_NOTIFY_HEARTBEAT = 4,
    PDX_NOTIFY_ABORT = 5
} pdx_notify_kind_t;
typedef enum pdx_direction { PDX_WRITE = 0, PDX_READ = 1 } pdx_direction_t;

#define PDX_MAX_NOTIFY_PAYLOAD 4096
#define PDX_DEFAULT_DEADLINE_MS 30000u   /* pdx_config_init's default_deadline_ms */
#define PDX_DEADLINE_DEFAULT 0xffffffffu /* deadline_ms: use the agent's default deadline */

/* Where a region's memory lives: only host memory is supported; PDX_MEMORY_CUDA is refused
 * with PDX_UNSUPPORTED. */
typedef enum pdx_memory_kind { PDX_MEMORY_HOST = 0, PDX_MEMORY_CUDA = 1 } pdx_memory_kind_t;
#define PDX_NAME_MAX 128

typedef struct pdx_agent pdx_agent_t;

/* Agent configuration. Fill with pdx_config_init(), then override fields. Strings are copied
 * by pdx_agent_create; NULL means "" (UCX's own choice / environment). */
typedef struct pdx_config {
    /* A non-empty name identifies one logical peer across restarts: unique among the agents a
     * process adds as peers, and kept by a restarted process, whose new instance pdx_add_peer
     * then treats as the next generation (the old one is retired). NULL/"" opts out: unnamed
     * peers are never replaced by another instance. */
    const char* name;
    pdx_backend_t backend;
    pdx_progress_t progress;
    const char* transports;  /* UCX_TLS for this agent, e.g. "tcp" or "posix,self" */
    const char* net_devices; /* UCX_NET_DEVICES, e.g. "lo" */
    pdx_error_mode_t error_mode;
    const char* host_id; /* same-host detection key; NULL = hostname + boot id */
    uint32_t heartbeat_interval_ms;
    uint32_t peer_timeout_ms;
    uint32_t default_deadline_ms; /* PDX_DEFAULT_DEADLINE_MS; 0 also means that */
    uint64_t max_transfer_bytes;
    uint32_t max_blocks_per_transfer;
    uint64_t completed_history;
    pdx_write_protocol_t write_protocol;
    /* Thread mode: microseconds the progress thread keeps polling after an event before it
     * sleeps (Config::progress_spin); 0 (default) = sleep at once. */
    uint32_t progress_spin_us;
} pdx_config_t;

/* Dense when stride == 0. Block i is at region base + offset + i * stride. */
typedef struct pdx_layout {
    uint32_t region;
    uint64_t offset;
    uint64_t block_bytes;
    uint64_t stride;
    uint32_t count;
} pdx_layout_t;

/* A notification to send (payload is copied; at most PDX_MAX_NOTIFY_PAYLOAD bytes). */
typedef struct pdx_notification {
    pdx_notify_kind_t kind;
    uint64_t transfer_id;
    uint32_t sequence;
    uint32_t expected;
    pdx_status_t status;
    const void* payload;
    size_t payload_bytes;
} pdx_notification_t;

/* A received notification (payload copied inline). */
typedef struct pdx_received_notification {
    uint64_t peer; /* 0 if the sender was not added with pdx_add_peer */
    uint64_t sender_instance;
    char peer_name[PDX_NAME_MAX]; /* NUL-terminated, truncated */
    pdx_notify_kind_t kind;
    uint64_t transfer_id;
    uint32_t sequence;
    uint32_t expected;
    pdx_status_t status;
    uint32_t payload_bytes;
    unsigned char payload[PDX_MAX_NOTIFY_PAYLOAD];
} pdx_received_notification_t;

typedef struct pdx_transfer_result {
    uint64_t handle;
    uint64_t transfer_id;
    uint64_t peer;
    pdx_direction_t direction;
    pdx_status_t status;
    uint64_t bytes;
    uint32_t descriptors; /* operations after sorting and merging */
    char message[256];    /* why, for non-OK states (NUL-terminated, truncated) */
} pdx_transfer_result_t;

typedef struct pdx_peer_info_s {
    uint64_t handle;
    char name[PDX_NAME_MAX];
    uint64_t instance;
    uint32_t generation;
    int alive;
    int same_host;
    int peer_error_mode;
    uint32_t layouts;
    int64_t ms_since_heard; /* -1 if nothing heard yet */
    int am_writes;          /* writes to this peer go as active messages */
    int process_watched;    /* same host: its process is watched (its death is seen at once) */
} pdx_peer_info_t;

/* Why a peer handle stopped being alive (values equal pdx::PeerGoneReason). */
typedef enum pdx_peer_gone_reason {
    PDX_PEER_REMOVED = 1,         /* pdx_remove_peer */
    PDX_PEER_REPLACED = 2,        /* a new generation of the same name was added */
    PDX_PEER_TIMEOUT = 3,         /* nothing heard for peer_timeout_ms, counted from add_peer */
    PDX_PEER_EXITED = 4,          /* same host: its process ended */
    PDX_PEER_CONNECTION_ERROR = 5 /* the transport reported the connection failed */
} pdx_peer_gone_reason_t;

typedef struct pdx_peer_event {
    uint64_t peer;
    char name[PDX_NAME_MAX]; /* NUL-terminated, truncated */
    uint64_t instance;
    uint32_t generation;
    pdx_peer_gone_reason_t reason;
    char message[256]; /* NUL-terminated, truncated */
} pdx_peer_event_t;

typedef struct pdx_latency {
    uint64_t count;
    uint64_t total_ns;
    uint64_t max_ns;
} pdx_latency_t;

typedef struct pdx_stats_s {
    uint64_t bytes_written;
    uint64_t bytes_read;
    uint64_t transfers_posted;
    uint64_t transfers_ok;
    uint64_t transfers_failed;
    uint64_t transfers_expired;
    uint64_t transfers_canceled;
    uint64_t transfers_peer_gone;
    uint64_t transfers_refused;
    uint64_t transfers_in_flight;
    uint64_t blocks_requested;
    uint64_t descriptors_posted;
    uint64_t notifications_sent;
    uint64_t notifications_received;
    uint64_t leases_active;
    uint64_t leases_expired;
    uint64_t peers;
    uint64_t peers_gone;
    pdx_latency_t post;            /* time inside write/read_blocks */
    pdx_latency_t completion;      /* post to terminal OK */
    uint64_t notifications_failed; /* refused by the transport (peer connection gone) */
    uint64_t transfers_settling;   /* ended, but posted operations still run (region pinned) */
    uint64_t regions_without_shm;  /* registered caller memory that shm RMA cannot reach */
} pdx_stats_t;

/* ---- misc ------------------------------------------------------------------------------ */
const char* pdx_status_string(pdx_status_t status); /* "ok", "peer_gone"...; never NULL */
const char* pdx_last_error(void);                   /* "" if none on this thread */
int pdx_ucx_available(void);                        /* 1 if built with the UCX backend */
void pdx_config_init(pdx_config_t* config);         /* the C++ defaults; backend UCX */

/* ---- agent ----------------------------------------------------------------------------- */
pdx_status_t pdx_agent_create(const pdx_config_t* config, pdx_agent_t** agent);
void pdx_agent_destroy(pdx_agent_t* agent); /* NULL is a no-op */
uint64_t pdx_agent_instance(const pdx_agent_t* agent);

/* ---- memory ---------------------------------------------------------------------------- */
pdx_status_t pdx_allocate_region(pdx_agent_t* agent, size_t bytes, uint32_t* region);
pdx_status_t pdx_register_region(pdx_agent_t* agent, void* data, size_t bytes, uint32_t* region);
pdx_status_t pdx_allocate_region_kind(pdx_agent_t* agent, size_t bytes, pdx_memory_kind_t kind,
                                      uint32_t* region);
pdx_status_t pdx_register_region_kind(pdx_agent_t* agent, void* data, size_t bytes,
                                      pdx_memory_kind_t kind, uint32_t* region);
pdx_status_t pdx_release_region(pdx_agent_t* agent, uint32_t region);
/* Base of the region (NULL if unknown); *bytes (optional) gets its size. */
void* pdx_region_memory(pdx_agent_t* agent, uint32_t region, size_t* bytes);
pdx_status_t pdx_add_layout(pdx_agent_t* agent, const pdx_layout_t* layout, uint32_t* layout_id);
/* Memory of one local block (NULL if out of range); *bytes (optional) gets its size. */
void* pdx_block(pdx_agent_t* agent, uint32_t layout, uint32_t id, size_t* bytes);

/* ---- peers ----------------------------------------------------------------------------- */
/* Writes the descriptor blob into buf. *size always receives the blob size. buf == NULL is a
 * size query (PDX_OK); a buffer smaller than the blob gives PDX_INVALID and writes nothing. */
pdx_status_t pdx_descriptor(pdx_agent_t* agent, void* buf, size_t capacity, size_t* size);
/* The blob must come over a trusted channel: its worker address and packed rkeys go to UCX as
 * they are (UCX unpacks rkeys without a length check; a corrupt one can crash the process).
 * The same instance again while its handle is alive: the same handle (refreshed); once that
 * handle was declared gone or removed: a new handle (the old one stays gone). A new instance
 * under the same
 * non-empty name: a new generation, and only once it is connected is the old handle retired
 * (a failed add leaves it as it was). An instance that a newer generation replaced is refused
 * (PDX_INVALID: a late copy of an old blob). */
pdx_status_t pdx_add_peer(pdx_agent_t* agent, const void* blob, size_t size, uint64_t* peer);
pdx_status_t pdx_remove_peer(pdx_agent_t* agent, uint64_t peer);
pdx_status_t pdx_peer_info(pdx_agent_t* agent, uint64_t peer, pdx_peer_info_t* info);
/* Called once for every peer handle that stops being alive, whatever the reason, after its
 * transfers got their terminal state; on the progress context with the same contract as
 * completion callbacks (see pdx_completion_fn). `event` is valid only during the call.
 * fn = NULL removes the callback (events are then dropped; pdx_peer_info still says
 * alive = 0). */
typedef void (*pdx_peer_event_fn)(const pdx_peer_event_t* event, void* user_data);
pdx_status_t pdx_set_peer_callback(pdx_agent_t* agent, pdx_peer_event_fn fn, void* user_data);

/* ---- transfers ------------------------------------------------------------------------- */
/* local_ids[i] <-> remote_ids[i], count pairs. notify (writes only, may be NULL) is sent to
 * the peer after the data is flushed; a write that fails sends Failed instead. */
pdx_status_t pdx_write_blocks(pdx_agent_t* agent, uint64_t peer, uint32_t local_layout,
                              const uint32_t* local_ids, uint32_t remote_layout,
                              const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                              uint32_t deadline_ms, const pdx_notification_t* notify,
                              uint64_t* handle);
pdx_status_t pdx_read_blocks(pdx_agent_t* agent, uint64_t peer, uint32_t local_layout,
                             const uint32_t* local_ids, uint32_t remote_layout,
                             const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                             uint32_t deadline_ms, uint64_t* handle);
/* Completion callback: called exactly once per transfer accepted by pdx_write_blocks_cb /
 * pdx_read_blocks_cb (returned PDX_OK), with its terminal state (the same one pdx_poll and
 * pdx_result report; the state is pollable before the callback runs). `result` is valid only
 * during the call.
 * Threading contract:
 * - PDX_PROGRESS_THREAD: it runs on the agent's progress thread, possibly before the posting
 *   call has returned on the posting thread (use result->handle and user_data, not the variable
 *   *handle points to). PDX_PROGRESS_EVENTFD: it runs inside pdx_progress() or pdx_wait() on the
 *   thread that calls them. In both modes never inside the posting call itself, even when the
 *   transfer completed there.
 * - Callbacks of one agent run one at a time, with no agent lock held: a callback may call any
 *   pdx_ function on the agent (post, poll, result, cancel, notify...) except
 *   pdx_agent_destroy, and may drive pdx_progress() of this or another agent (nesting across
 *   agents does not deadlock). It must not block: in thread mode pdx_wait() from a callback stalls
 * the thread that completes transfers (it returns PDX_IN_PROGRESS when its timeout passes).
 * - pdx_agent_destroy drops callbacks not yet delivered; none runs after it returns. */
typedef void (*pdx_completion_fn)(const pdx_transfer_result_t* result, void* user_data);

/* pdx_write_blocks / pdx_read_blocks with a completion callback (on_complete may be NULL:
 * then they are exactly the calls above). user_data is passed through untouched. */
pdx_status_t pdx_write_blocks_cb(pdx_agent_t* agent, uint64_t peer, uint32_t local_layout,
                                 const uint32_t* local_ids, uint32_t remote_layout,
                                 const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                                 uint32_t deadline_ms, const pdx_notification_t* notify,
                                 pdx_completion_fn on_complete, void* user_data, uint64_t* handle);
pdx_status_t pdx_read_blocks_cb(pdx_agent_t* agent, uint64_t peer, uint32_t local_layout,
                                const uint32_t* local_ids, uint32_t remote_layout,
                                const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                                uint32_t deadline_ms, pdx_completion_fn on_complete,
                                void* user_data, uint64_t* handle);
/* PDX_IN_PROGRESS, a terminal state, or PDX_NOT_FOUND. */
pdx_status_t pdx_poll(pdx_agent_t* agent, uint64_t handle);
/* Blocks up to timeout_ms; returns the state then (PDX_IN_PROGRESS on timeout). */
pdx_status_t pdx_wait(pdx_agent_t* agent, uint64_t handle, uint32_t timeout_ms);
/* Ends the transfer with PDX_CANCELED. PDX_CANCELED and PDX_EXPIRED end the transfer, not its
 * backend operation: operations already posted run to completion, so bytes may still land at
 * the target (writes) or in the LOCAL blocks (reads) after the terminal state was reported.
 * Reuse a canceled or expired read's local blocks only once their region has no transfer in
 * flight (pdx_release_region refuses it with PDX_BUSY until then), or after the peer was
 * removed or declared gone (its operations' memory is then never touched again). */
pdx_status_t pdx_cancel(pdx_agent_t* agent, uint64_t handle); /* ended already: PDX_INVALID */
/* Cancels every transfer in flight with this transfer id; *canceled (optional) gets how many.
 * PDX_NOT_FOUND if none is in flight. */
pdx_status_t pdx_cancel_transfer_id(pdx_agent_t* agent, uint64_t transfer_id, size_t* canceled);

/* One group of a batch: count pairs local_ids[i] (local_layout) <-> remote_ids[i]
 * (remote_layout). */
typedef struct pdx_group {
    uint32_t local_layout;
    const uint32_t* local_ids;
    uint32_t remote_layout;
    const uint32_t* remote_ids;
    size_t count;
} pdx_group_t;
/* A batch: `count` groups (e.g. the K and V layouts of every layer) as ONE transfer: one
 * handle, one terminal state, one callback, one notify (writes). A destination named by two
 * groups is refused (PDX_INVALID). on_complete may be NULL. */
pdx_status_t pdx_write_batch(pdx_agent_t* agent, uint64_t peer, const pdx_group_t* groups,
                             size_t count, uint64_t transfer_id, uint32_t deadline_ms,
                             const pdx_notification_t* notify, pdx_completion_fn on_complete,
                             void* user_data, uint64_t* handle);
pdx_status_t pdx_read_batch(pdx_agent_t* agent, uint64_t peer, const pdx_group_t* groups,
                            size_t count, uint64_t transfer_id, uint32_t deadline_ms,
                            pdx_completion_fn on_complete, void* user_data, uint64_t* handle);
/* Fills *result; returns PDX_OK (the transfer's own state is result->status) or NOT_FOUND. */
pdx_status_t pdx_result(pdx_agent_t* agent, uint64_t handle, pdx_transfer_result_t* result);

/* ---- notifications --------------------------------------------------------------------- */
pdx_status_t pdx_notify(pdx_agent_t* agent, uint64_t peer, const pdx_notification_t* n);
/* Moves up to max received notifications into out; returns how many. Those that do not fit
 * stay queued for the next call. */
size_t pdx_drain_notifications(pdx_agent_t* agent, pdx_received_notification_t* out, size_t max);

/* ---- leases on local blocks, keyed by transfer id -------------------------------------- */
pdx_status_t pdx_lease(pdx_agent_t* agent, uint64_t transfer_id, uint32_t layout,
                       const uint32_t* ids, size_t count, uint32_t ttl_ms);
pdx_status_t pdx_renew(pdx_agent_t* agent, uint64_t transfer_id, uint32_t ttl_ms);
/* Renews every listed lease that exists; returns how many were renewed. */
size_t pdx_renew_many(pdx_agent_t* agent, const uint64_t* transfer_ids, size_t count,
                      uint32_t ttl_ms);
pdx_status_t pdx_release(pdx_agent_t* agent, uint64_t transfer_id);
int pdx_is_leased(pdx_agent_t* agent, uint32_t layout, uint32_t id);
/* Sweeps expired leases; writes up to max transfer ids to out (the rest are kept for the next
 * call) and returns how many were written. Ids expired by the progress loop are all kept until
 * collected here (none dropped): call it regularly when using leases. */
size_t pdx_expire_leases(pdx_agent_t* agent, uint64_t* out, size_t max);

/* ---- progress -------------------------------------------------------------------------- */
int pdx_event_fd(pdx_agent_t* agent); /* -1 in thread mode */
size_t pdx_progress(pdx_agent_t* agent);
/* 1: safe to wait on the fd; 0: call pdx_progress again; -1: agent is NULL */
int pdx_arm(pdx_agent_t* agent);

pdx_status_t pdx_stats(pdx_agent_t* agent, pdx_stats_t* stats);

#ifdef __cplusplus
}
#endif

#endif /* PDX_PDX_H */
