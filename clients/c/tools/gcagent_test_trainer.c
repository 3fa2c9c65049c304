/* gcagent_test_trainer: a synthetic trainer for integration tests and demos, written in C11 to
 * prove that gcagent_client.h is pure C.
 *
 *   gcagent_test_trainer --socket PATH [--job NAME] [--local-rank R] [--local-size L]
 *       [--world-rank W] [--world-size S] (--tensors N1,N2,... | --model FILE.csv)
 *       [--iterations K] [--codec NAME] [--param k=v]... [--check exact|bound:EPS|converge:EPS|none]
 *       [--timeout-ms T] [--report] [--backward-ms MS] [--try-device-uuid HEX32] [--keep-going]
 *
 * Tensor i has key i and priority -i. Each iteration (numbered 1..K) fills element e of
 * tensor key with v(world rank, iteration, key, e), submits every key, waits, and checks the
 * buffers against the average of v over world ranks 0..S-1, which it computes itself.
 * v is a hash-based value on a 2^-14 grid in [-1/16, 1/16): fp32 sums of up to 2^13 such
 * values are exact in any order, so "exact" allows only the rounding of the final division
 * plus, for an agent that divides before summing, (S+1) float epsilons of 1/16.
 * "bound:EPS" allows an absolute error EPS (lossy codecs). "converge:EPS" submits the same
 * gradient every iteration and checks, after the last one, that the mean of the outputs over
 * all iterations is within EPS of the true average: error feedback makes what a coarse codec
 * drops in one step arrive in later ones.
 *
 * --copy keeps the gradients in the trainer's own memory, as a framework does, and times the
 * copy into the shared slot before the submit and the copy out after the wait with it.
 *
 * With --check none the buffers are filled in the first iteration only (timings then measure
 * the reduction, not the fill); later iterations reduce whatever the buffers hold.
 *
 * --backward-ms MS submits the keys one at a time, last key first, MS milliseconds apart, as a
 * backward pass hands over its layers' gradients, sleeping in gcagent_wait_any in between. With
 * --report it prints, per iteration and in completion order, "key_done key=K ms=T" (T since
 * the first submit of the iteration) and "first_layer_ms=T" for key 0.
 *
 * --report prints "connected trainer_id=.. node_rank=.. node_count=.. tensors=.. bytes=..",
 * then per iteration "iteration=I ms=submit-to-complete MB/s=gradient-bytes/second" and last
 * "summary iterations=K bytes=B mean_ms=.. min_ms=.. max_ms=.. MB/s=..".
 *
 * --try-device-uuid HEX32 first declares the tensors as living on the GPU with that UUID (32
 * hex digits) and prints "device_declare: ok" or "device_declare: STATUS: MESSAGE"; either way
 * it then declares them on the host and goes on, as a shim falls back when the agent cannot
 * serve its GPU.
 *
 * --keep-going is a resilient trainer, as one that catches gcagent's errors: a failed step is
 * reported ("failed iteration=I: MESSAGE") and the next one goes on; a connection the agent
 * closed (it died) is opened again, waiting up to --timeout-ms for the agent, and the tensors
 * are declared again; a failed step is followed by a 20 ms pause, as a framework's next step
 * takes a while. Nodes may then sum steps of different numbers (the agents realign the
 * job after a loss), so the values do not depend on the step, except element 0 of every
 * tensor, which holds the step number: every key of a step must show the same element 0 (a
 * step's tensors were summed together), and the other elements the exact average over the
 * trainers of the nodes the agent names for the step (gcagent_result_nodes: a job that shrank
 * averages over its members only), and its report lines end in "nodes=N members=A,B,..."
 * and, on the step after which trainers load a node's weights, "resync_root=R".
 *
 * Exit status: 0 success, 1 wrong values (first mismatches printed), 2 a gcagent call failed
 * (gcagent_last_error printed), 3 bad command line or model file.
 */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gcagent_client.h"

#define MAX_PARAMS 16
#define MAX_TENSORS 65536
#define MAX_REPORTED_MISMATCHES 5

static const char* g_prog = "gcagent_test_trainer";

static void die(int code, const char* what, const char* detail) {
  fprintf(stderr, "%s: %s%s%s\n", g_prog, what, detail ? ": " : "", detail ? detail : "");
  exit(code);
}

static void check_call(int rc, const char* what, const gcagent_client* c) {
  if (rc != GCAGENT_OK) {
    fprintf(stderr, "%s: %s failed (%s): %s\n", g_prog, what, gcagent_status_string(rc), gcagent_last_error(c));
    exit(2);
  }
}

static uint64_t mix(uint64_t x) { /* splitmix64 finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t seed_of(uint32_t rank, uint64_t iteration, uint64_t key) {
  return mix(mix(mix(rank + 0x9e3779b97f4a7c15ULL) ^ iteration) ^ key);
}

static float value(uint64_t seed, uint64_t i) {
  const int64_t q = (int64_t)(mix(seed + i * 0x9e3779b97f4a7c15ULL) >> 53) - 1024; /* [-1024, 1024) */
  return (float)q / 16384.0f;
}

#define MAX_NODES 1024

static double now_ms(void);

/* Element 0 in --keep-going: the step, on the same 2^-14 grid, so sums stay exact. */
static float step_tag(uint64_t it) { return (float)(it % 4096) / 16384.0f; }

/* --keep-going: the agent is gone (the connection failed): a new one, with the tensors declared. */
static gcagent_client* reconnect(gcagent_client* c, const char* socket_path, const char* job, uint32_t local_rank,
                                 uint32_t local_size, int timeout_ms, const gcagent_tensor* tensors, size_t count) {
  gcagent_close(c);
  c = NULL;
  /* A killed agent's socket may linger until its successor replaces it: try again meanwhile. */
  const double give_up = now_ms() + timeout_ms;
  int rc;
  while ((rc = gcagent_connect(socket_path, job, local_rank, local_size, timeout_ms, &c)) == GCAGENT_ERR_IO &&
         now_ms() < give_up) {
    struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
  }
  check_call(rc, "reconnect", NULL);
  check_call(gcagent_declare(c, tensors, count), "declare again", c);
  printf("reconnected\n");
  return c;
}

static int connection_lost(int rc) { return rc == GCAGENT_ERR_IO || rc == GCAGENT_ERR_PROTOCOL; }

/* Submits keys last to first, backward_ms apart, and notes when each one completes. Between
 * submits it sleeps in gcagent_wait_any on the keys in flight, until one completes or the next
 * submit is due: no polling. */
static void backward_pass(gcagent_client* c, uint64_t it, const uint64_t* keys, size_t count, double backward_ms,
                          int timeout_ms, int report, double start) {
  gcagent_step* pending = calloc(count, sizeof *pending);
  if (pending == NULL) die(2, "out of memory", NULL);
  size_t submitted = 0, in_flight = 0, completed = 0;
  double next_submit = start;
  while (completed < count) {
    double now = now_ms();
    while (submitted < count && now >= next_submit) {
      const uint64_t key = keys[count - 1 - submitted];
      check_call(gcagent_submit(c, it, &key, 1), "submit", c);
      pending[in_flight++] = (gcagent_step){it, key};
      ++submitted;
      next_submit += backward_ms;
    }
    if (now - start > timeout_ms) die(2, "backward pass: keys still incomplete after --timeout-ms", NULL);
    const double until = submitted < count ? next_submit : start + timeout_ms + 1;
    const int wait_ms = until > now ? (int)(until - now) + 1 : 0;
    if (in_flight == 0) {
      struct timespec pause = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
      nanosleep(&pause, NULL);
      continue;
    }
    size_t index = in_flight;
    const int rc = gcagent_wait_any(c, pending, in_flight, wait_ms, -1, &index);
    if (rc == GCAGENT_ERR_TIMEOUT) continue;
    check_call(rc, "wait", c);
    const uint64_t key = pending[index].key;
    pending[index] = pending[--in_flight];
    ++completed;
    now = now_ms();
    if (report) printf("key_done key=%" PRIu64 " ms=%.3f\n", key, now - start);
    if (report && key == 0) printf("first_layer_ms=%.3f\n", now - start);
  }
  free(pending);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t parse_u64(const char* s, const char* flag) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (s[0] == '\0' || s[0] == '-' || *end != '\0') die(3, "not a non-negative integer", flag);
  return (uint64_t)v;
}

static size_t add_tensor(uint64_t* elements, size_t count, uint64_t n) {
  if (count == MAX_TENSORS) die(3, "too many tensors", NULL);
  if (n == 0) die(3, "a tensor has 0 elements", NULL);
  elements[count] = n;
  return count + 1;
}

static size_t parse_tensor_list(const char* list, uint64_t* elements) {
  size_t count = 0;
  char* copy = strdup(list);
  for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ","))
    count = add_tensor(elements, count, parse_u64(tok, "--tensors"));
  free(copy);
  return count;
}

/* name,elements rows; '#' comments, blank lines and one header line are skipped. */
static size_t parse_model(const char* path, uint64_t* elements) {
  FILE* f = fopen(path, "r");
  if (f == NULL) die(3, "cannot open the model file", path);
  char line[1024];
  size_t count = 0, rows = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '\0' || line[0] == '#') continue;
    const char* comma = strrchr(line, ',');
    char* end = NULL;
    unsigned long long n = comma ? strtoull(comma + 1, &end, 10) : 0;
    if (comma == NULL || end == comma + 1 || *end != '\0') {
      if (rows++ == 0) continue; /* the header line */
      die(3, "model rows must be name,elements", line);
    }
    ++rows;
    count = add_tensor(elements, count, (uint64_t)n);
  }
  fclose(f);
  if (count == 0) die(3, "the model file lists no tensors", path);
  return count;
}

int main(int argc, char** argv) {
  const char *socket_path = NULL, *job = "test", *codec = "", *check = "exact", *device_uuid = NULL;
  uint32_t local_rank = 0, local_size = 1, world_rank = 0, world_size = 1;
  uint64_t iterations = 10;
  int timeout_ms = 60000, report = 0, copy = 0, keep_going = 0;
  double backward_ms = -1; /* < 0: submit every key at once */
  const char* param_keys[MAX_PARAMS];
  const char* param_values[MAX_PARAMS];
  size_t params = 0, count = 0;
  uint64_t* elements = calloc(MAX_TENSORS, sizeof *elements);
  if (elements == NULL) die(2, "out of memory", NULL);

  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (strcmp(flag, "--report") == 0) {
      report = 1;
      continue;
    }
    if (strcmp(flag, "--copy") == 0) {
      copy = 1;
      continue;
    }
    if (strcmp(flag, "--keep-going") == 0) {
      keep_going = 1;
      continue;
    }
    if (i + 1 >= argc) die(3, "missing value for", flag);
    const char* v = argv[++i];
    if (strcmp(flag, "--socket") == 0) socket_path = v;
    else if (strcmp(flag, "--job") == 0) job = v;
    else if (strcmp(flag, "--local-rank") == 0) local_rank = (uint32_t)parse_u64(v, flag);
    else if (strcmp(flag, "--local-size") == 0) local_size = (uint32_t)parse_u64(v, flag);
    else if (strcmp(flag, "--world-rank") == 0) world_rank = (uint32_t)parse_u64(v, flag);
    else if (strcmp(flag, "--world-size") == 0) world_size = (uint32_t)parse_u64(v, flag);
    else if (strcmp(flag, "--tensors") == 0) count = parse_tensor_list(v, elements);
    else if (strcmp(flag, "--model") == 0) count = parse_model(v, elements);
    else if (strcmp(flag, "--iterations") == 0) iterations = parse_u64(v, flag);
    else if (strcmp(flag, "--codec") == 0) codec = v;
    else if (strcmp(flag, "--timeout-ms") == 0) timeout_ms = (int)parse_u64(v, flag);
    else if (strcmp(flag, "--check") == 0) check = v;
    else if (strcmp(flag, "--backward-ms") == 0) backward_ms = (double)parse_u64(v, flag);
    else if (strcmp(flag, "--try-device-uuid") == 0) device_uuid = v;
    else if (strcmp(flag, "--param") == 0) {
      char* eq = strchr(v, '=');
      if (eq == NULL || eq == v) die(3, "--param wants key=value", v);
      if (params == MAX_PARAMS) die(3, "too many --param", v);
      char* key = strdup(v);
      key[eq - v] = '\0';
      param_keys[params] = key;
      param_values[params++] = key + (eq - v) + 1;
    } else die(3, "unknown flag", flag);
  }
  if (socket_path == NULL) die(3, "--socket is required", NULL);
  if (count == 0) die(3, "give --tensors or --model", NULL);
  if (world_size == 0 || world_rank >= world_size) die(3, "--world-rank must be below --world-size", NULL);

  double bound = 0.0;
  int checking = 1, converging = 0;
  if (strcmp(check, "exact") == 0) bound = (world_size + 1.0) * FLT_EPSILON / 16.0;
  else if (strncmp(check, "bound:", 6) == 0 || strncmp(check, "converge:", 9) == 0) {
    converging = check[0] == 'c';
    const char* text = strchr(check, ':') + 1;
    char* end = NULL;
    bound = strtod(text, &end);
    if (end == text || *end != '\0' || !(bound >= 0)) die(3, "bad --check bound", check);
    checking = !converging;
  } else if (strcmp(check, "none") == 0) checking = 0;
  else die(3, "--check wants exact, bound:EPS, converge:EPS or none", check);

  gcagent_client* c = NULL;
  check_call(gcagent_connect(socket_path, job, local_rank, local_size, timeout_ms, &c), "connect", NULL);

  gcagent_tensor* tensors = calloc(count, sizeof *tensors);
  uint64_t* keys = calloc(count, sizeof *keys);
  if (tensors == NULL || keys == NULL) die(2, "out of memory", NULL);
  uint64_t total_bytes = 0;
  for (size_t t = 0; t < count; ++t) {
    keys[t] = t;
    tensors[t].key = t;
    tensors[t].elements = elements[t];
    tensors[t].priority = -(int32_t)t;
    tensors[t].codec = codec;
    tensors[t].param_keys = param_keys;
    tensors[t].param_values = param_values;
    tensors[t].param_count = params;
    total_bytes += elements[t] * sizeof(float);
  }
  if (device_uuid != NULL) {
    uint8_t uuid[16];
    if (strlen(device_uuid) != 32) die(3, "--try-device-uuid wants 32 hex digits", device_uuid);
    for (int b = 0; b < 16; ++b) {
      unsigned byte = 0;
      if (sscanf(device_uuid + 2 * b, "%2x", &byte) != 1) die(3, "--try-device-uuid wants 32 hex digits", device_uuid);
      uuid[b] = (uint8_t)byte;
    }
    const int rc = gcagent_declare_device(c, tensors, count, uuid);
    if (rc == GCAGENT_OK) printf("device_declare: ok\n");
    else printf("device_declare: %s: %s\n", gcagent_status_string(rc), gcagent_last_error(c));
    fflush(stdout);
  }
  check_call(gcagent_declare(c, tensors, count), "declare", c);
  for (size_t t = 0; t < count; ++t)
    if (gcagent_buffer(c, t) == NULL || gcagent_buffer_elements(c, t) != elements[t])
      die(2, "a declared tensor has no buffer of its size", gcagent_last_error(c));
  if (report)
    printf("connected trainer_id=%" PRIu32 " node_rank=%" PRIu32 " node_count=%" PRIu32 " tensors=%zu bytes=%" PRIu64 "\n",
           gcagent_trainer_id(c), gcagent_node_rank(c), gcagent_node_count(c), count, total_bytes);

  double sum_ms = 0, min_ms = INFINITY, max_ms = 0;
  size_t mismatches = 0;
  double** running = NULL; /* converge: the sum of the outputs over iterations, per element */
  if (converging) {
    running = calloc(count, sizeof *running);
    for (size_t t = 0; running != NULL && t < count; ++t)
      if ((running[t] = calloc(elements[t], sizeof **running)) == NULL) die(2, "out of memory", NULL);
  }
  float** own = NULL; /* --copy: the trainer's own gradient buffers, as a framework has them */
  if (copy) {
    own = calloc(count, sizeof *own);
    for (size_t t = 0; own != NULL && t < count; ++t)
      if ((own[t] = calloc(elements[t], sizeof **own)) == NULL) die(2, "out of memory", NULL);
    if (own == NULL) die(2, "out of memory", NULL);
  }
  if (keep_going && (backward_ms >= 0 || copy || converging)) die(3, "--keep-going goes with neither --backward-ms, --copy nor converge", NULL);
  for (uint64_t it = 1; it <= iterations; ++it) {
    /* Unchecked runs (benchmarks, the demo) fill once: refilling each time would let the
     * slowest trainer's fill show up in everyone's submit-to-complete time. */
    for (size_t t = 0; (checking || converging || it == 1 || keep_going) && t < count; ++t) {
      float* buf = copy ? own[t] : gcagent_buffer(c, t);
      const uint64_t seed = seed_of(world_rank, converging || keep_going ? 0 : it, t);
      for (uint64_t e = 0; e < elements[t]; ++e) buf[e] = value(seed, e);
      if (keep_going) buf[0] = step_tag(it);
    }
    const double start = now_ms();
    for (size_t t = 0; copy && t < count; ++t) memcpy(gcagent_buffer(c, t), own[t], elements[t] * sizeof(float));
    if (keep_going) {
      int rc = gcagent_submit(c, it, keys, count);
      if (rc == GCAGENT_OK) rc = gcagent_wait(c, it, keys, count, timeout_ms);
      if (rc != GCAGENT_OK) {
        printf("failed iteration=%" PRIu64 ": %s: %s\n", it, gcagent_status_string(rc), gcagent_last_error(c));
        fflush(stdout);
        /* Keys of the step still in flight finish (or fail) before the next step submits them. */
        for (size_t t = 0; !connection_lost(rc) && t < count; ++t) {
          const int key_rc = gcagent_wait(c, it, &keys[t], 1, timeout_ms);
          if (connection_lost(key_rc) || key_rc == GCAGENT_ERR_TIMEOUT) rc = GCAGENT_ERR_IO;
        }
        if (connection_lost(rc)) c = reconnect(c, socket_path, job, local_rank, local_size, timeout_ms, tensors, count);
        /* A framework's next step takes a while too: failed steps do not spin. */
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
        continue;
      }
    } else if (backward_ms < 0) {
      check_call(gcagent_submit(c, it, keys, count), "submit", c);
      check_call(gcagent_wait(c, it, keys, count, timeout_ms), "wait", c);
    } else {
      backward_pass(c, it, keys, count, backward_ms, timeout_ms, report, start);
    }
    for (size_t t = 0; copy && t < count; ++t) memcpy(own[t], gcagent_buffer(c, t), elements[t] * sizeof(float));
    const double ms = now_ms() - start;
    sum_ms += ms;
    min_ms = ms < min_ms ? ms : min_ms;
    max_ms = ms > max_ms ? ms : max_ms;
    /* A job that shrinks or grows averages over the trainers of the nodes the agent says this
     * result was made under: world rank node * local_size + local rank. */
    uint32_t nodes[MAX_NODES];
    uint32_t node_count = 0;
    if (keep_going) {
      node_count = gcagent_result_nodes(c, nodes, MAX_NODES);
      if (node_count == 0 || node_count > MAX_NODES) die(2, "the agent named no nodes for a completed step", NULL);
    }
    const uint32_t averaged = keep_going ? node_count * local_size : world_size;
    if (report) {
      printf("iteration=%" PRIu64 " ms=%.3f MB/s=%.1f", it, ms, (double)total_bytes / 1e3 / (ms > 0 ? ms : 1e-6));
      if (keep_going) {
        printf(" nodes=%" PRIu32 " members=", node_count);
        for (uint32_t n = 0; n < node_count; ++n) printf("%s%" PRIu32, n ? "," : "", nodes[n]);
        if (gcagent_resync_root(c) >= 0) printf(" resync_root=%" PRId64, gcagent_resync_root(c));
      }
      printf("\n");
      fflush(stdout);
    }
    for (size_t t = 0; converging && t < count; ++t) {
      const float* buf = gcagent_buffer(c, t);
      for (uint64_t e = 0; e < elements[t]; ++e) running[t][e] += buf[e];
    }
    for (size_t t = 0; checking && t < count; ++t) {
      const float* buf = gcagent_buffer(c, t);
      if (keep_going && buf[0] != gcagent_buffer(c, 0)[0] && mismatches++ < MAX_REPORTED_MISMATCHES)
        fprintf(stderr, "%s: iteration %" PRIu64 " key %zu summed other steps than key 0: element 0 is %.9g, key 0's %.9g\n",
                g_prog, it, t, (double)buf[0], (double)gcagent_buffer(c, 0)[0]);
      for (uint64_t e = keep_going ? 1 : 0; e < elements[t]; ++e) {
        double sum = 0;
        for (uint32_t w = 0; w < averaged; ++w) {
          const uint32_t rank = keep_going ? nodes[w / local_size] * local_size + w % local_size : w;
          sum += value(seed_of(rank, keep_going ? 0 : it, t), e);
        }
        const float expected = (float)(sum / averaged);
        const double tolerance = bound + FLT_EPSILON * fabs(expected);
        if (fabs((double)buf[e] - expected) <= tolerance) continue; /* false for NaN: reported */
        if (mismatches++ < MAX_REPORTED_MISMATCHES)
          fprintf(stderr, "%s: mismatch at iteration %" PRIu64 " key %zu index %" PRIu64 ": got %.9g, expected %.9g (tolerance %.3g)\n",
                  g_prog, it, t, e, (double)buf[e], (double)expected, tolerance);
      }
    }
    if (mismatches > 0) {
      fprintf(stderr, "%s: %zu wrong values in iteration %" PRIu64 "\n", g_prog, mismatches, it);
      gcagent_close(c);
      return 1;
    }
  }
  for (size_t t = 0; converging && iterations > 0 && t < count; ++t) {
    for (uint64_t e = 0; e < elements[t]; ++e) {
      double sum = 0;
      for (uint32_t w = 0; w < world_size; ++w) sum += value(seed_of(w, 0, t), e);
      const double expected = sum / world_size, mean = running[t][e] / (double)iterations;
      if (fabs(mean - expected) <= bound) continue;
      if (mismatches++ < MAX_REPORTED_MISMATCHES)
        fprintf(stderr, "%s: no convergence at key %zu index %" PRIu64 ": mean %.9g over %" PRIu64 " iterations, expected %.9g (bound %.3g)\n",
                g_prog, t, e, mean, iterations, expected, bound);
    }
    free(running[t]);
  }
  free(running);
  if (mismatches > 0) {
    fprintf(stderr, "%s: %zu values did not converge\n", g_prog, mismatches);
    gcagent_close(c);
    return 1;
  }
  if (report && iterations > 0)
    printf("summary iterations=%" PRIu64 " bytes=%" PRIu64 " mean_ms=%.3f min_ms=%.3f max_ms=%.3f MB/s=%.1f\n", iterations,
           total_bytes, sum_ms / (double)iterations, min_ms, max_ms,
           (double)total_bytes * (double)iterations / 1e3 / (sum_ms > 0 ? sum_ms : 1e-6));
  gcagent_close(c);
  for (size_t t = 0; copy && t < count; ++t) free(own[t]);
  free(own);
  for (size_t p = 0; p < params; ++p) free((void*)param_keys[p]);
  free(tensors);
  free(keys);
  free(elements);
  return 0;
}
