// Every stat gcagent exports, once: name (after the gcagent_ prefix), type, labels and
// help. The registry, `gcagent --list-metrics`, the README table and the dashboard test
// are all built from this list, so a name exists in one place only.
//
// X(name, type, buckets, labels, help)
//   type: Counter, Gauge or Histogram; buckets: Fast (codec kernels), Slow (whole
//   reductions) or None; labels: comma-separated, each with a bounded set of values:
//   codec (registered codec names), direction (sent|received), peer (node rank),
//   size_class (small|medium|large), decision (compressed|uncompressed),
//   kind (bad_message|timeout|peer_lost|reduction_failed|auth_failed|device_unavailable|accept_failed),
//   step (encode|decode|wire|aggregate), term (w|b|overhead),
//   reason (malformed|unauthenticated|timed_out|over_capacity),
//   message (contribution|result),
//   event (peer_lost|peer_shutdown|peer_rejoined|realigned|reduction_timeout|shrunk|grown|
//   trainer_reconnected|stalled),
//   training_job (a job's name; at most 32 live jobs have their own, more share "other"; not
//   "job", which Prometheus sets to the scrape job and would rename ours to exported_job).
#pragma once

#define GCAGENT_STATS(X)                                                                            \
  X(raw_bytes_total, Counter, None, "codec,direction", "fp32 bytes of the slices, before encoding") \
  X(wire_bytes_total, Counter, None, "codec,direction", "encoded bytes of the slices on the wire")  \
  X(compression_ratio, Gauge, None, "codec,direction",                                              \
    "raw bytes over wire bytes since start (refreshed every second)")                               \
  X(encode_seconds, Histogram, Fast, "codec", "time to encode one slice with its residual")        \
  X(decode_seconds, Histogram, Fast, "codec", "time to decode one slice and add it")               \
  X(merge_seconds, Histogram, Fast, "", "time to add local fp32 contributions of one tensor or slice") \
  X(reduction_seconds, Histogram, Slow, "size_class",                                               \
    "time from a tensor's reduce to its completion; small < 256 KiB <= medium < 16 MiB <= large")  \
  X(iterations_completed_total, Counter, None, "", "iterations whose every tensor was reduced")    \
  X(job_iterations_completed_total, Counter, None, "training_job",                                  \
    "iterations of one training job whose every tensor was reduced (removed when its last trainer leaves)") \
  X(job_trainers, Gauge, None, "training_job", "trainer processes of one training job on this node") \
  X(tensors_reduced_total, Counter, None, "", "tensor reductions completed successfully")          \
  X(queue_depth, Gauge, None, "peer", "slices owned here that wait for this peer's contribution")  \
  X(inflight_slices, Gauge, None, "peer", "slices handed to the transport for this peer, not yet sent") \
  X(send_queue, Gauge, None, "peer", "slices waiting in this peer's priority queue (P3), not yet handed to the transport") \
  X(pending_sums, Gauge, None, "", "slices owned here whose sum is still being made (their contributions held in memory)") \
  X(trainers_connected, Gauge, None, "", "trainer processes connected to the control socket")     \
  X(peers_up, Gauge, None, "", "peer agents whose link is up")                                     \
  X(residual_l2_norm, Gauge, None, "codec",                                                         \
    "L2 norm of the error-feedback residual of a sampled slice (one in 64 encodes)")               \
  X(codec_silent_total, Counter, None, "codec",                                                     \
    "tensors whose nonzero gradients this codec encoded as nothing but zeros for 64 iterations (the residual only grows: lower the threshold)") \
  X(scheduler_decisions_total, Counter, None, "decision", "tensor reductions by whether they were compressed") \
  X(planned_tensors, Gauge, None, "decision", "declared tensors the planner sends compressed or uncompressed now") \
  X(planned_topology, Gauge, None, "topology", "declared tensors by the topology they travel by: ps, ring or allgather (scheduler.topology, reduce.topology, auto's choice)") \
  X(cost_model, Gauge, None, "codec,step,term",                                                     \
    "selective-compression cost model: w in seconds per fp32 element, b and overhead in seconds")  \
  X(errors_total, Counter, None, "kind", "errors by kind")                                         \
  X(recovery_events_total, Counter, None, "event",                                                  \
    "recovery events: peer_lost, peer_shutdown (it said so), peer_rejoined, realigned (a job gave iterations up to go on with its peers), reduction_timeout, shrunk and grown (the membership lost or took back a node), trainer_reconnected (a trainer process connected again in place of its old connection), stalled (this agent did not run for longer than transport.peer_timeout; its steps in flight then waited for the peers' word)") \
  X(stale_slices_total, Counter, None, "message",                                                       \
    "slices of an iteration given up here (after a loss or a realignment), dropped: contribution or result") \
  X(non_finite_slices_total, Counter, None, "",                                                     \
    "slices meant to be coded that went uncompressed, their residual untouched, because they held an inf or a NaN (a node's share or an owner's sum; fp16 mixed precision's overflow steps: every rank sees the non-finite sum, as under DDP)") \
  X(members, Gauge, None, "", "nodes the reductions run on now (transport.on_peer_loss = shrink changes it)") \
  X(membership_epoch, Gauge, None, "", "changes of the membership so far, as the nodes agree on them")  \
  X(stalled_jobs, Gauge, None, "", "jobs whose reductions all failed for a whole transport.reduction_timeout while trainers kept trying") \
  X(peer_refusals_total, Counter, None, "reason",                                                   \
    "peer links refused at the handshake, before UCX hears of them: malformed, unauthenticated (another token), timed_out, over_capacity") \
  X(gpu_copy_bytes_total, Counter, None, "direction",                                               \
    "bytes of device tensors copied between GPU and host; sent: to the host, received: to the GPU (encodings when the GPU codes, whole gradients when staged)") \
  X(build_info, Gauge, None, "version,codecs,cuda,ucx", "always 1; the labels describe the build")
