/* gcagent client library: the versioned C ABI that every framework shim calls.
 *
 * A trainer process connects to its node's gcagent over a Unix stream socket, declares the
 * gradient tensors it will reduce, and gets for each one a float buffer inside a shared-memory
 * segment that the agent owns. Each iteration it writes a gradient into the buffer in place,
 * submits the keys, and waits (or polls) until the agent has written the averaged gradient
 * back into the same buffers.
 *
 *   gcagent_client* c = NULL;
 *   if (gcagent_connect("/run/gcagent.sock", "job", local_rank, local_size, 30000, &c) != GCAGENT_OK)
 *     fprintf(stderr, "%s\n", gcagent_last_error(NULL));
 *   gcagent_tensor t = {.key = 1, .elements = n, .priority = -layer};
 *   gcagent_declare(c, &t, 1);
 *   float* g = gcagent_buffer(c, 1);      write the gradient into g[0..n)
 *   gcagent_submit(c, it, &t.key, 1);
 *   gcagent_wait(c, it, &t.key, 1, -1);   g now holds the average over all trainers
 *   gcagent_close(c);
 *
 * Every call that can fail returns a gcagent_status code; gcagent_last_error() gives the full
 * message. No call throws, aborts or raises a signal (SIGPIPE included). A client is not
 * thread-safe: calls on one client must not overlap (a shim that uses it from several threads
 * serialises them). Different clients are independent.
 *
 * ABI: the library is libgcagent_client.so.1 and exports only the gcagent_* symbols, versioned
 * GCAGENT_CLIENT_1 (ABI version 1), GCAGENT_CLIENT_2 (ABI version 2 added the GPU calls below)
 * GCAGENT_CLIENT_3 (ABI version 3 added gcagent_connect_flags), GCAGENT_CLIENT_4 (ABI
 * version 4 added gcagent_result_nodes and gcagent_resync_root) and GCAGENT_CLIENT_5 (ABI
 * version 5 added gcagent_wait_any and gcagent_buffer_fd) and GCAGENT_CLIENT_6 (ABI version 6
 * added gcagent_state_get, gcagent_state_free, gcagent_state_put and gcagent_declare_dtypes)
 * and GCAGENT_CLIENT_7 (ABI version 7 added gcagent_job_iteration) and GCAGENT_CLIENT_8 (ABI
 * version 8 added gcagent_reduction_timeout_ms).
 * A shim compiled against
 * this header can compare GCAGENT_CLIENT_ABI_VERSION with gcagent_abi_version() at load time:
 * a library of a higher ABI version has every older call, which behaves as before.
 * Numeric values of gcagent_status never change.
 *
 * GPU tensors (ABI 2): gcagent_declare_device instead of gcagent_declare gives each key a slot
 * in device memory the agent exports (CUDA IPC), on the trainer's GPU. The trainer copies its
 * gradient into gcagent_device_buffer(c, key) on a stream, calls gcagent_submit_device with that
 * stream (the agent's copy waits for the stream's work so far, not the host), and after
 * gcagent_wait_device reads the average from the same slot on that stream. The library loads
 * libcuda at run time; it links no CUDA library.
 */
#ifndef GCAGENT_CLIENT_H_
#define GCAGENT_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#define GCAGENT_CLIENT_ABI_VERSION 8

#if defined(__GNUC__) || defined(__clang__)
#define GCAGENT_API __attribute__((visibility("default")))
#else
#define GCAGENT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every call that can fail. */
typedef enum gcagent_status {
  GCAGENT_OK = 0,
  GCAGENT_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a zero count, a name that is too long, ... */
  GCAGENT_ERR_IO = 2,               /* the socket failed or the agent closed it (agent gone) */
  GCAGENT_ERR_TIMEOUT = 3,          /* the timeout passed first; the call may be repeated */
  GCAGENT_ERR_PROTOCOL = 4,         /* the agent sent a malformed or unexpected message */
  GCAGENT_ERR_AGENT = 5,            /* the agent answered with an error (see gcagent_last_error) */
  GCAGENT_ERR_NOT_FOUND = 6,        /* a key that is not declared */
  GCAGENT_ERR_STATE = 7,            /* not valid now: submit before declare, wait for a key that
                                       was not submitted for that iteration, resubmitting a key
                                       still in flight, declare while submits are in flight */
  GCAGENT_ERR_NO_MEMORY = 8,        /* an allocation or a mapping failed */
  GCAGENT_ERR_INTERNAL = 9,         /* a bug in this library */
  GCAGENT_ERR_UNSUPPORTED = 10      /* needs CUDA, which this library's build or this host lacks */
} gcagent_status;

/* A connection to the node's agent. Opaque; created by gcagent_connect, freed by gcagent_close. */
typedef struct gcagent_client gcagent_client;

/* One gradient tensor, float32. */
typedef struct gcagent_tensor {
  uint64_t key;        /* unique within one declare; the same key on every trainer of the job */
  uint64_t elements;   /* float32 elements, 1 .. 2^40 */
  int32_t priority;    /* higher is sent first; shims pass minus the layer index */
  const char* codec;   /* compression codec name (at most 32 bytes); NULL or "" for the agent's default */
  const char* const* param_keys;   /* codec parameters: param_count names (at most 64 bytes each) */
  const char* const* param_values; /* and their values (at most 256 bytes each); NULL when param_count is 0 */
  size_t param_count;              /* at most 16 */
} gcagent_tensor;

/* GCAGENT_CLIENT_ABI_VERSION of the library actually loaded. */
GCAGENT_API uint32_t gcagent_abi_version(void);

/* A short static description of a gcagent_status value ("timed out"); never NULL. */
GCAGENT_API const char* gcagent_status_string(int code);

/* Connects to the agent listening at socket_path and joins `job` as local rank `local_rank` of
 * `local_size` trainers on this node. Retries while the socket is missing or refuses
 * connections (the agent may still be starting) for up to timeout_ms milliseconds (< 0: forever,
 * 0: one try; gcagent_connect_flags below can fail at once instead when the socket does not
 * exist); once connected, the agent gets at least 5 more seconds to answer the handshake.
 * On success stores a new client in *out. On failure *out is set to NULL and the message is
 * available from gcagent_last_error(NULL) on the same thread. */
GCAGENT_API int gcagent_connect(const char* socket_path, const char* job, uint32_t local_rank,
                                uint32_t local_size, int timeout_ms, gcagent_client** out);

/* gcagent_connect_flags' flags (ABI version 3). */
#define GCAGENT_CONNECT_WAIT_FOR_AGENT 1u /* retry while socket_path does not exist yet */

/* gcagent_connect with flags (ABI version 3). Without GCAGENT_CONNECT_WAIT_FOR_AGENT a
 * socket_path that does not exist fails at once with GCAGENT_ERR_IO and a message naming the
 * path, whatever timeout_ms says: a trainer started without its agent hears so immediately.
 * With it, the call behaves as gcagent_connect (which is this call with that flag). A socket
 * that exists but refuses connections is retried until the timeout either way (an agent
 * between bind and listen). The library prints nothing; a caller that waits may say so. An
 * unknown flag is GCAGENT_ERR_INVALID_ARGUMENT. */
GCAGENT_API int gcagent_connect_flags(const char* socket_path, const char* job, uint32_t local_rank,
                                      uint32_t local_size, int timeout_ms, uint32_t flags, gcagent_client** out);

/* Declares the tensors this trainer will reduce and maps the shared segment that holds their
 * buffers. May be called again (e.g. when a framework rebuilds its buckets) once no submit is in
 * flight: the new declaration replaces the old one entirely, and pointers returned by
 * gcagent_buffer for the old one become invalid. If the agent rejects the declaration, the old
 * one stays in place. Waits for the agent's answer up to the reply timeout (60 s by default,
 * see gcagent_set_reply_timeout). */
GCAGENT_API int gcagent_declare(gcagent_client* client, const gcagent_tensor* tensors, size_t count);

/* The shared buffer of a declared key: `gcagent_buffer_elements` floats that the trainer writes
 * its gradient into before submitting, and reads the averaged gradient from after a successful
 * wait. NULL (0 elements) for an unknown key or a null client. Valid until the next declare or
 * gcagent_close. Do not touch a buffer between its submit and its completion. */
GCAGENT_API float* gcagent_buffer(gcagent_client* client, uint64_t key);
GCAGENT_API uint64_t gcagent_buffer_elements(const gcagent_client* client, uint64_t key);

/* Tells the agent that the buffers of `keys` hold this trainer's gradients of `iteration`.
 * Returns without waiting for the reduction. Every key must be declared, listed once, and not
 * still in flight from an earlier submit. */
GCAGENT_API int gcagent_submit(gcagent_client* client, uint64_t iteration, const uint64_t* keys,
                               size_t count);

/* Waits until every listed key, submitted for `iteration`, holds the averaged gradient.
 * Returns GCAGENT_OK; GCAGENT_ERR_AGENT if the agent failed the submit of one of them (the
 * failure sticks to those keys until they are submitted again); GCAGENT_ERR_TIMEOUT after
 * timeout_ms milliseconds (< 0: no limit; the wait may simply be repeated); GCAGENT_ERR_IO if
 * the agent went away (never hangs on a dead agent). Completions that arrive for other keys or
 * iterations meanwhile are remembered. Waiting again for completed keys returns GCAGENT_OK
 * until they are submitted again. */
GCAGENT_API int gcagent_wait(gcagent_client* client, uint64_t iteration, const uint64_t* keys,
                             size_t count, int timeout_ms);

/* gcagent_wait with a timeout of 0: handles whatever the agent has already sent and returns
 * GCAGENT_OK if the keys are complete, else GCAGENT_ERR_TIMEOUT (or an error). */
GCAGENT_API int gcagent_poll(gcagent_client* client, uint64_t iteration, const uint64_t* keys,
                             size_t count);

/* How long declare waits for the agent's answer, and how long any call waits to send a
 * message, in milliseconds (< 0: no limit). Default 60000. */
GCAGENT_API int gcagent_set_reply_timeout(gcagent_client* client, int timeout_ms);

/* The full message of the last failed call on `client` ("" if none failed yet), valid until the
 * next call on that client. With a null client: the message of the last failed gcagent_connect
 * on the calling thread. Never NULL. */
GCAGENT_API const char* gcagent_last_error(const gcagent_client* client);

/* What the agent said when it accepted the connection (0 for a null client). The node count
 * is that of the nodes the job's reductions run on: under transport.on_peer_loss = "shrink"
 * it changes when a node is left behind or taken back, as the agent tells during a wait. */
GCAGENT_API uint32_t gcagent_trainer_id(const gcagent_client* client);
GCAGENT_API uint32_t gcagent_node_rank(const gcagent_client* client);
GCAGENT_API uint32_t gcagent_node_count(const gcagent_client* client);
/* (ABI version 8) The agent's transport.reduction_timeout in milliseconds: by then it fails a
 * step it cannot complete, and until then it may still complete one into the slots. A shim
 * that gives a step up on a timeout of its own waits at least this long. 0: the agent has
 * none, or is older and did not say (or a null client). */
GCAGENT_API uint32_t gcagent_reduction_timeout_ms(const gcagent_client* client);

/* (ABI version 4) The node ranks, ascending, whose trainers the latest completed result was
 * averaged over: the job's membership it was made under (every node until a change under
 * transport.on_peer_loss = "shrink"). Writes at most `capacity` ranks; returns how many there
 * are (0 before any completion or for a null client). */
GCAGENT_API uint32_t gcagent_result_nodes(const gcagent_client* client, uint32_t* ranks, uint32_t capacity);

/* (ABI version 4) After a wait that completed a step: the node rank whose trainers hold the
 * weights every trainer must load now, or -1. It is set for the first step this trainer
 * completes under a membership that took nodes in (a node back after it was left behind, or
 * one that trained apart under transport.quorum = "none"), and for the first step completed
 * after a step was given up on some node (which other nodes may have completed: their models
 * then differ by it), on every member's trainers for the same step: they then broadcast from
 * that node's local rank 0 trainer (gcagent.torch's sync_parameters does), as DDP broadcasts
 * at its start. -1 for every other step, and once a key of the step failed. */
GCAGENT_API int64_t gcagent_resync_root(const gcagent_client* client);

/* ---- Waiting without polling, and slots a caller maps itself (ABI version 5) ---- */

/* One submitted key of one iteration, as gcagent_wait_any lists them. */
typedef struct gcagent_step {
  uint64_t iteration;
  uint64_t key;
} gcagent_step;

/* Sleeps until one of `count` submitted (iteration, key) pairs is complete or failed, or
 * `wake_fd` (>= 0; -1: none) is readable, or timeout_ms passes (< 0: no limit). Then:
 * GCAGENT_OK with *index the first listed pair that is complete; GCAGENT_ERR_AGENT with *index
 * the first that failed (gcagent_last_error says why); GCAGENT_ERR_TIMEOUT with *index = count
 * when the timeout passed or wake_fd became readable first (the call never reads wake_fd: its
 * owner drains it); GCAGENT_ERR_INVALID_ARGUMENT for a wake_fd that is not open;
 * GCAGENT_ERR_IO when the agent went away. Pairs already complete return at
 * once. One thread can so wait for a whole step's keys as they complete while another wakes it
 * to submit more (the client stays single-threaded: the waiting thread makes every call). */
GCAGENT_API int gcagent_wait_any(gcagent_client* client, const gcagent_step* steps, size_t count, int timeout_ms,
                                 int wake_fd, size_t* index);

/* A new read-write descriptor of the shared segment that holds the host slot of `key`, and the
 * slot's byte offset in it, for a caller that maps the slot itself (mmap of
 * offset + gcagent_buffer_elements * 4 bytes, rounded out to pages): its mapping stays valid
 * after a later declare or gcagent_close, which unmap only the library's own. The caller closes
 * the descriptor. Returns the descriptor, or -1 (gcagent_last_error says why: an unknown key, a
 * key declared on the device). A framework's gradients can so live in the slots themselves. */
GCAGENT_API int gcagent_buffer_fd(gcagent_client* client, uint64_t key, uint64_t* offset);

/* ---- GPU tensors (ABI version 2) ---- */

/* The 16-byte UUID of CUDA device `device_ordinal` as this process sees it (the same as
 * cudaDeviceProp::uuid and nvidia-smi's GPU-... name). GCAGENT_ERR_UNSUPPORTED without a GPU. */
GCAGENT_API int gcagent_gpu_uuid(int device_ordinal, uint8_t uuid_out[16]);

/* gcagent_declare for tensors that live on the GPU with UUID `gpu_uuid`: the agent answers with
 * device slots on that GPU, which this call maps. The agent must use the same GPU; when it has
 * none or another one it refuses (GCAGENT_ERR_AGENT; the message names both GPUs), and the
 * previous declaration stays in place. Replaces the previous declaration like gcagent_declare. */
GCAGENT_API int gcagent_declare_device(gcagent_client* client, const gcagent_tensor* tensors,
                                       size_t count, const uint8_t gpu_uuid[16]);

/* The device slot of a key declared with gcagent_declare_device, as a CUdeviceptr of
 * gcagent_buffer_elements(client, key) floats, 256-byte aligned; 0 for an unknown key or a key
 * declared on the host. Valid until the next declare or gcagent_close. */
GCAGENT_API uint64_t gcagent_device_buffer(gcagent_client* client, uint64_t key);

/* gcagent_submit for device slots: the agent reads the slots after the work queued so far on
 * `cuda_stream` (a CUstream / cudaStream_t; NULL is the legacy default stream), without this
 * call waiting for it. */
GCAGENT_API int gcagent_submit_device(gcagent_client* client, uint64_t iteration, const uint64_t* keys,
                                      size_t count, void* cuda_stream);

/* gcagent_wait for device slots: once the keys are complete, work queued on `cuda_stream` from now
 * on runs after the agent's writes of the averages (the host does not wait for the GPU). */
GCAGENT_API int gcagent_wait_device(gcagent_client* client, uint64_t iteration, const uint64_t* keys,
                                    size_t count, int timeout_ms, void* cuda_stream);

/* ---- Error-feedback state (ABI version 6) ---- */

/* A declared tensor's error-feedback state as this node's agent holds it (the residuals its
 * codec owes, of the node's side and of the slices this node owns), as an opaque blob for a
 * checkpoint: *data (freed with gcagent_state_free) of *bytes bytes. Call between steps, when
 * none of the tensor's reductions is in flight (else GCAGENT_ERR_AGENT). An agent older than
 * ABI 6's answers GCAGENT_ERR_AGENT naming an unknown message type. */
GCAGENT_API int gcagent_state_get(gcagent_client* client, uint64_t key, uint8_t** data, uint64_t* bytes);
GCAGENT_API void gcagent_state_free(uint8_t* data);

/* Puts a blob of gcagent_state_get back (on the node that saved it, after a restart): the
 * tensor's next step continues with those residuals. Call after the declare and before the
 * tensor's first submit. The agent refuses a blob of another tensor, size, slicing or codec
 * (GCAGENT_ERR_AGENT, naming what differs). Parts that belonged to another layout of the job (a
 * different node rank or node count: those slices have other owners now) are left out and
 * counted in *dropped (may be NULL). */
GCAGENT_API int gcagent_state_put(gcagent_client* client, uint64_t key, const uint8_t* data, uint64_t bytes,
                                  uint32_t* dropped);

/* ---- The job's iterations (ABI version 7) ---- */

/* Trainers number their steps themselves; the job's nodes agree on the iterations they reduce,
 * and after a realignment (a lost or frozen peer, a node that joined) the two differ by an
 * offset the agent keeps. *job_iteration is the job's iteration this trainer's `iteration`
 * would be reduced as if submitted now (0: it was given up). A trainer that chooses what a step
 * sends by the job's iteration (DiLoCo's fragment turns) asks before it submits: every node then
 * sends the same tensor in the same job iteration. Call after the hello (any time). An agent
 * older than ABI 7's answers GCAGENT_ERR_AGENT naming an unknown message type. */
GCAGENT_API int gcagent_job_iteration(gcagent_client* client, uint64_t iteration, uint64_t* job_iteration);

/* ---- bfloat16 and float16 tensors (ABI version 6) ---- */

#define GCAGENT_DTYPE_FLOAT32 1
#define GCAGENT_DTYPE_BFLOAT16 2
#define GCAGENT_DTYPE_FLOAT16 3

/* gcagent_declare with each tensor's element type (dtypes[i], a GCAGENT_DTYPE_*): a bfloat16 or
 * float16 tensor's slot holds 2-byte elements (gcagent_buffer's pointer is to them: cast it).
 * The agent widens them exactly to fp32 at each submit, reduces in fp32 (codecs and residuals
 * included) and rounds the result back into the slot to nearest even before completing. Host
 * slots only: gcagent_declare_device takes float32 tensors. */
GCAGENT_API int gcagent_declare_dtypes(gcagent_client* client, const gcagent_tensor* tensors, const uint8_t* dtypes,
                                       size_t count);

/* Closes the socket, unmaps the segment and frees the client. NULL is ignored. */
GCAGENT_API void gcagent_close(gcagent_client* client);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GCAGENT_CLIENT_H_ */
