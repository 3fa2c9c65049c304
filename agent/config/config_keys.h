// Every configuration key, once: section, key, type, default, allowed range or choices, and
// help. The TOML loader, the environment and CLI overrides, --print-config and the operator
// docs are all generated from this list.
//
// X(section, key, type, default, lo, hi, choices, help)
//   type: Text, Integer, Real, Flag or TextList; lo/hi bound Integer and Real values;
//   choices ("a|b") restrict Text values ("" allows any).
#pragma once

#define GCAGENT_CONFIG_KEYS(X)                                                                  \
  X(agent, socket, Text, "/run/gcagent/control.sock", 0, 0, "",                                 \
    "path of the control socket trainers connect to")                                          \
  X(agent, shm_prefix, Text, "gcagent", 0, 0, "",                                               \
    "prefix of the shared-memory segment names in /dev/shm")                                    \
  X(agent, node_rank, Integer, "0", 0, 4095, "", "this agent's index in transport.peers")      \
  X(agent, summary_interval, Real, "10", 0, 86400, "",                                         \
    "seconds between progress summaries in the log (an idle agent says so once); 0: none")      \
  X(agent, group, Text, "", 0, 0, "",                                                           \
    "group that may use the control socket and the segments (mode 0660); empty: owner only (0600)") \
  X(agent, user, Text, "", 0, 0, "",                                                            \
    "user the agent becomes once its ports are bound, before it reads a byte from a peer or a trainer (needs a start as root); empty: stays who it started as") \
  X(agent, max_connections, Integer, "256", 1, 65536, "",                                       \
    "control connections open at once; more are closed as they come")                         \
  X(agent, hello_timeout, Real, "10", 0.01, 3600, "",                                           \
    "seconds a new control connection has to say hello before it is closed")                    \
  X(agent, frame_timeout, Real, "30", 0.01, 3600, "",                                           \
    "seconds a control message has to arrive whole once its header did")                        \
  X(agent, codec_threads, Integer, "0", 0, 256, "",                                            \
    "threads that encode and decode large slices; 0 uses every core")                          \
  X(agent, state_dir, Text, "", 0, 0, "",                                                       \
    "directory (made if missing) where the agent keeps what must outlive its restart: its membership votes (file membership-votes, transport.quorum = majority), written to disk before each vote leaves; one per agent, on a disk the restart keeps; empty: votes live in memory only, and an agent restarted during a membership change may let two memberships of one epoch form") \
  X(transport, backend, Text, "ucx", 0, 0, "ucx|loopback",                                        \
    "how agents reach each other: ucx, or loopback (a node on its own; agents of one process in tests)") \
  X(transport, listen, Text, "0.0.0.0:18515", 0, 0, "", "address:port this agent accepts peers on (its own authenticated handshake; UCX connects only after it)") \
  X(transport, peers, TextList, "", 0, 0, "",                                                   \
    "host:port of every agent in rank order, this one included")                               \
  X(transport, peer_timeout, Real, "10", 0.05, 3600, "",                                        \
    "seconds without a heartbeat before a peer is declared lost")                              \
  X(transport, heartbeat_interval, Real, "1", 0.01, 600, "", "seconds between heartbeats")     \
  X(transport, reduction_timeout, Real, "60", 0, 86400, "",                                     \
    "seconds a tensor's reduction may take before it fails and its iteration is given up on every node; 0: no deadline") \
  X(transport, on_peer_loss, Text, "fail", 0, 0, "fail|shrink",                                 \
    "what a lost peer does to the job: fail (reductions fail until it is back), or shrink (after transport.shrink_grace the job goes on without it, and takes it back when it returns)") \
  X(transport, shrink_grace, Real, "30", 0, 86400, "",                                          \
    "seconds a lost peer may stay away before the job goes on without it (transport.on_peer_loss = shrink)") \
  X(transport, min_nodes, Integer, "1", 1, 65536, "",                                          \
    "fewest nodes a shrink leaves: a node cut off from the rest waits for them instead of training on its own") \
  X(transport, quorum, Text, "majority", 0, 0, "majority|none",                               \
    "who must agree to a new membership under shrink: majority (more than half of the last agreed one, so no two parts of a partition both go on) or none (the leader alone: a minority may go on, and the part that loses at the heal is taken in anew)") \
  X(transport, net_devices, Text, "auto", 0, 0, "",                                             \
    "network devices UCX may use (UCX_NET_DEVICES syntax); auto: the one holding this agent's address in transport.peers, plus RDMA ports; all: every device") \
  X(transport, data_ports, Text, "", 0, 0, "",                                                  \
    "port range UCX's TCP interfaces listen in, as first-last (for firewalls); empty: any")      \
  X(transport, max_handshakes, Integer, "64", 1, 65536, "",                                     \
    "peer handshakes open at once on transport.listen; more are closed as they come")            \
  X(transport, max_handshakes_per_address, Integer, "8", 1, 65536, "",                          \
    "of those, from one remote address")                                                        \
  X(scheduler, slice_elements, Integer, "40000", 1024, 67108864, "",                            \
    "elements per slice; each slice has one owner agent")                                      \
  X(scheduler, inflight_per_peer, Integer, "10", 1, 4096, "",                                   \
    "slices in flight to one peer before higher priorities may overtake")                      \
  X(scheduler, inflight_bytes, Integer, "0", 0, 68719476736, "",                               \
    "optional byte budget in flight per peer; 0 means no byte limit")                          \
  X(scheduler, priority, Flag, "true", 0, 0, "",                                                \
    "P3: front layers' slices and codec work go first; false: first come, first served everywhere (a baseline)") \
  X(scheduler, topology, Text, "ps", 0, 0, "ps|ring|allgather|auto",                           \
    "how a tensor's slices travel unless it names reduce.topology: ps (each slice's owner agent sums every node's contribution and sends the result to all), ring (CaSync-Ring: partial sums, then results, go round the agents in rank order; each agent sends to one neighbour), allgather (every agent sends its encoded contribution to all and sums them all itself: for the sparse codecs) or auto (per tensor, from the cost model)") \
  X(scheduler, link_gbps, Real, "1", 0.001, 100000, "",                                        \
    "the links' speed in Gbit/s the planner's reference model prices: auto's topologies, and the partition counts of compress.selection = auto; set the same on every node (both are on the wire)") \
  X(scheduler, refit_interval, Real, "5", 0, 86400, "",                                         \
    "seconds between re-fits of the auto selection's cost model (the first: at once)")        \
  X(compress, codec, Text, "none", 0, 0, "", "default codec for tensors that name none")       \
  X(compress, params, TextList, "", 0, 0, "",                                                   \
    "parameters of the default codec, as key=value items")                                     \
  X(compress, result_codec, Text, "same", 0, 0, "",                                             \
    "codec of the summed slices owners send back: same (as the tensor's) or a codec name")     \
  X(compress, selection, Text, "size", 0, 0, "size|auto",                                       \
    "which gradients are compressed: size (at least min_elements) or auto (measured cost model)") \
  X(compress, min_elements, Integer, "262144", 0, 4294967295, "",                              \
    "with selection size, gradients smaller than this are sent uncompressed")                  \
  X(compress, residual_budget_bytes, Integer, "4294967296", 0, 1099511627776, "",              \
    "memory the error-feedback residuals may use")                                             \
  X(compress, on_gpu, Flag, "true", 0, 0, "",                                                  \
    "gradients trainers keep on a GPU are summed, encoded and decoded on that GPU, residuals kept there; false stages them through host memory for the CPU codecs") \
  X(compress, gpu_staged_codecs, TextList, "none,topk,dgc,threshold", 0, 0, "",                \
    "codecs whose GPU gradients are staged through host memory for the CPU codecs even with on_gpu (none, which the host sends from pinned memory without a copy, and the selection codecs, slower on the GPU at the default slice size: see bench/gpu_path)") \
  X(metrics, listen, Text, "127.0.0.1:9464", 0, 0, "",                                          \
    "address:port of the Prometheus /metrics endpoint; port 0 picks one (logged); empty disables it") \
  X(security, token_file, Text, "", 0, 0, "",                                                   \
    "file holding the cluster token (every node the same secret); gcagent-run and the torch backend make one per job") \
  X(security, allow_unauthenticated, Flag, "false", 0, 0, "",                                   \
    "true: an agent with peers and no security.token_file starts, its peers unauthenticated; false refuses to start") \
  X(testing, stop_after_promise, Flag, "false", 0, 0, "",                                       \
    "tests only: the agent stops itself (SIGSTOP) once it has kept its first promise to another node's membership proposal in agent.state_dir, before the promise is sent, so a test can kill it between its promise and the install")
