// The reduction engine over the loopback transport: N agents in this thread, each with
// its own local trainers' buffers, against a reference average computed in double.
#include "agent/engine/reduction_engine.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "agent/coding/host_coder_device.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/agent/engine/engine_runs.h"
#include "tests/agent/coding/host_coders.h"
#include "agent/wire/slice_message.h"
#include "tests/common/epoch_clock.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

TEST(ReductionEngineTest, AutoPlannerRefitsAtTheFirstReductionOnAMachineThatJustBooted) {
  // The engines' clock starts one second after its epoch, as steady_clock does on a machine
  // booted a second ago; a re-fit interval of an hour must not hold back the first re-fit.
  EngineOptions o = smallSlices();
  o.selection = scheduler::Selection::kAuto;
  o.refit_interval = 3600;
  o.now = testing::clockSinceEpoch();
  Cluster c(2, o);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(c.planner(r).epoch(), 0u);
  runAndCheck(c, 1, {5000}, 2, 1e-5, "none");
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(c.planner(r).epoch(), 1u) << "node " << r;
}

// P3: eight layers submitted last layer first, each encoded before the next is submitted
// (`encode_each`, as in a backward pass slower than the codec), while the credit window
// holds two slices per peer and nothing is delivered yet. Layer 0, submitted last, overtakes
// every slice still queued: node 1 receives node 0's contributions of layer 7 that were
// handed over at once, then layers 0, 1, ... 7. With a window larger than the iteration
// every slice was handed over as it was encoded: they arrive in submission order. Without
// `encode_each` all eight wait for the codec together, which takes the highest priority
// first. Over loopback with manual host streams the order is a function of the submissions
// only, never of timing (the shaped-link timings are in bench/scheduler_bench.py).
struct Arrivals {
  std::vector<uint64_t> contributions;  // at node 1, from node 0
  std::vector<uint64_t> results;        // at node 0, from node 1
};

// Consecutive slices of one layer counted once.
std::vector<uint64_t> layersOf(const std::vector<uint64_t>& keys) {
  std::vector<uint64_t> order;
  for (uint64_t key : keys)
    if (order.empty() || order.back() != key) order.push_back(key);
  return order;
}

Arrivals arrivalsOfABackwardPass(uint32_t window, bool encode_each, bool prioritize = true) {
  EngineOptions o = smallSlices();
  o.inflight_per_peer = window;
  o.prioritize = prioritize;
  Cluster c(2, o);
  const uint64_t job = jobIdOf("p3");
  std::vector<TensorSpec> layers;
  for (uint64_t k = 0; k < 8; ++k) layers.push_back({k, 10000, -static_cast<int32_t>(k), {"none", {}}, {}});
  for (uint32_t r = 0; r < 2; ++r) EXPECT_TRUE(c.engine(r).declareJob(job, layers).ok());
  std::vector<std::vector<std::vector<float>>> grads(2, std::vector<std::vector<float>>(8));
  for (uint64_t k = 8; k-- > 0;)
    for (uint32_t r = 0; r < 2; ++r) {
      grads[r][k].assign(10000, 1.0f + static_cast<float>(r));
      EXPECT_TRUE(c.engine(r).reduce(job, 1, k, {grads[r][k].data()}).ok());
      if (encode_each) c.settleCoders();
    }
  c.pump();
  for (const Done& d : c.done(0)) EXPECT_TRUE(d.status.ok()) << d.status.toString();
  EXPECT_EQ(c.done(0).size(), 8u);
  for (uint32_t r = 0; r < 2; ++r)
    for (uint64_t k = 0; k < 8; ++k) EXPECT_EQ(grads[r][k], std::vector<float>(10000, 1.5f)) << r << " " << k;
  return {layersOf(c.contributions(1)), layersOf(c.results(0))};
}

std::vector<uint64_t> arrivalOrderOfABackwardPass(uint32_t window, bool encode_each) {
  return arrivalsOfABackwardPass(window, encode_each).contributions;
}

TEST(ReductionEngineTest, HighPriorityLayerSubmittedLastOvertakesTheQueuedSlices) {
  EXPECT_EQ(arrivalOrderOfABackwardPass(2, true), (std::vector<uint64_t>{7, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(arrivalOrderOfABackwardPass(4096, true), (std::vector<uint64_t>{7, 6, 5, 4, 3, 2, 1, 0}));
}

TEST(ReductionEngineTest, ContributionsWaitingAtTheOwnerAreMergedHighestPriorityFirst) {
  // Node 1 receives node 0's layers last first, all at once; it merges and encodes the sums
  // of layer 0 first, so node 0 receives its results first.
  const Arrivals a = arrivalsOfABackwardPass(4096, true);
  EXPECT_EQ(a.contributions, (std::vector<uint64_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(a.results, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(ReductionEngineTest, WithoutP3EverythingIsFirstComeFirstServed) {
  // scheduler.priority false (the baseline P3 is measured against): the codec thread and the
  // owner take the layers in the order they came, and so does the wire.
  const Arrivals a = arrivalsOfABackwardPass(4096, /*encode_each=*/false, /*prioritize=*/false);
  EXPECT_EQ(a.contributions, (std::vector<uint64_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(a.results, (std::vector<uint64_t>{7, 6, 5, 4, 3, 2, 1, 0}));
}

TEST(ReductionEngineTest, LayersWaitingForTheCodecAreEncodedHighestPriorityFirst) {
  // Even with the wire in FIFO order, layer 0 leaves first: it was encoded first.
  EXPECT_EQ(arrivalOrderOfABackwardPass(4096, false), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(ReductionEngineTest, SingleNodeIsALocalAllreduce) {
  Cluster c(1, smallSlices());
  runAndCheck(c, 2, {1, 7, 1000, 2501}, 3, 1e-6);
}

TEST(ReductionEngineTest, ExactAverageAcrossNodesWithNone) {
  for (uint32_t nodes : {2u, 3u, 4u}) {
    SCOPED_TRACE(nodes);
    Cluster c(nodes, smallSlices());
    runAndCheck(c, nodes == 3 ? 2 : 1, {1, 7, 999, 1000, 1001, 12345}, 3, 1e-6);
    EXPECT_EQ(c.gauge(0, metrics::Id::pending_sums), 0);
  }
}

TEST(ReductionEngineTest, CompressedAverageStaysWithinTheCodecBound) {
  Cluster c(2, smallSlices());
  // fp16 both ways: relative error of a few 2^-11 on values of magnitude <= 1.
  runAndCheck(c, 2, {3000, 17}, 2, 2e-3, "fp16");
}

TEST(ReductionEngineTest, CodedNodesAverageExactlyWithNone) {
  // Local sums, encodings and result decodes through a LocalCoder: the same exact average.
  Cluster one(1, smallSlices(), {true});
  runAndCheck(one, 3, {1, 7, 1000, 2501}, 3, 1e-6);
  for (uint32_t nodes : {2u, 3u}) {
    SCOPED_TRACE(nodes);
    Cluster c(nodes, smallSlices(), std::vector<bool>(nodes, true));
    runAndCheck(c, 2, {1, 7, 999, 1000, 1001, 12345}, 3, 1e-6);
    EXPECT_EQ(c.gauge(0, metrics::Id::pending_sums), 0);
  }
}

TEST(ReductionEngineTest, CodedAndHostNodesOfOneJobAgreeBitForBit) {
  // GPU and CPU nodes in one job: the same bytes reach every trainer.
  Cluster c(3, smallSlices(), {true, false, true});
  const std::vector<uint64_t> sizes = {3000, 17, 4096};
  runAndCheck(c, 2, sizes, 3, 2e-3, "fp16");
  // On a coded node only encodings cross PCIe: the fp16 results, 2 bytes per element, and the
  // fp16 contributions, except for the slices the node owns, whose exact sum it adds itself.
  double sent = 0, received = 0;
  for (size_t k = 0; k < sizes.size(); ++k)
    for (uint32_t s = 0; s * 1000 < sizes[k]; ++s) {
      const double n = static_cast<double>(std::min<uint64_t>(1000, sizes[k] - s * 1000));
      sent += 3 * n * (c.engine(0).membership().ownerOf(100 + k, s) == 0 ? 4 : 2);
      received += 3 * n * 2;
    }
  EXPECT_EQ(c.engine(0).stats().gpuCopy(true).Value(), sent);
  EXPECT_EQ(c.engine(0).stats().gpuCopy(false).Value(), received);
  EXPECT_EQ(c.engine(1).stats().gpuCopy(true).Value(), 0);
  Cluster sparse(2, smallSlices(), {false, true});
  runAndCheck(sparse, 1, {5000}, 2, 2.0, "dgc");  // dgc sends 0.1%: only the agreement is checked
}

TEST(ReductionEngineTest, OwnersThatWorkAsAGpuDoGiveTheHostOwnersBytesForEveryCodec) {
  // The owner side through a coder that stages as a GPU's (sums in its memory, each
  // contribution staged in for its merge, the result encoded there and copied out): bit for
  // bit what host owners give, under every topology that merges at an owner or a hop.
  for (Topology topology : {Topology::kPs, Topology::kRing, Topology::kAllgather})
    for (const char* codec : {"none", "fp16", "2bit", "onebit", "terngrad", "topk", "dgc", "fp8", "int4"}) {
      SCOPED_TRACE(::testing::Message() << codec << " " << topologyName(topology));
      EngineOptions o = smallSlices();
      o.topology = topology;
      std::vector<std::vector<float>> on_host, on_staged;
      Cluster host(3, o);
      runAndCheck(host, 2, {3000, 17, 4096}, 3, 8.0, codec, &on_host);
      Cluster staged(3, o, {}, /*staged_owners=*/true);
      runAndCheck(staged, 2, {3000, 17, 4096}, 3, 8.0, codec, &on_staged);
      ASSERT_EQ(on_host.size(), on_staged.size());
      for (size_t i = 0; i < on_host.size(); ++i)
        EXPECT_EQ(0, std::memcmp(on_host[i].data(), on_staged[i].data(), on_host[i].size() * sizeof(float))) << i;
      EXPECT_EQ(staged.gauge(0, metrics::Id::pending_sums), 0);
    }
}

TEST(ReductionEngineTest, CodedJobsGiveTheHostJobsBytesForEveryCodec) {
  // A node's side of the reduction on its coder (sum, encode with its residuals, decode) is
  // bit for bit the engine's own: a job run on coded nodes gives what it gives on host nodes.
  for (const char* codec : {"none", "fp16", "bf16", "2bit", "1bit", "onebit", "terngrad", "qsgd", "randomk", "topk",
                            "dgc", "threshold", "fp8", "int4", "mxfp4"}) {
    SCOPED_TRACE(codec);
    std::vector<std::vector<float>> on_host, on_coders, mixed;
    Cluster host(3, smallSlices());
    runAndCheck(host, 2, {3000, 17, 4096}, 3, 8.0, codec, &on_host);  // the bound is the codecs' tests' business
    Cluster coded(3, smallSlices(), {true, true, true});
    runAndCheck(coded, 2, {3000, 17, 4096}, 3, 8.0, codec, &on_coders);
    Cluster both(3, smallSlices(), {false, true, false});
    runAndCheck(both, 2, {3000, 17, 4096}, 3, 8.0, codec, &mixed);
    ASSERT_EQ(on_host.size(), on_coders.size());
    for (size_t i = 0; i < on_host.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(on_host[i].data(), on_coders[i].data(), on_host[i].size() * sizeof(float))) << i;
      EXPECT_EQ(0, std::memcmp(on_host[i].data(), mixed[i].data(), on_host[i].size() * sizeof(float))) << i;
    }
  }
}

// Whether a tensor's gradients on a GPU are coded there is part of its route, handed to the
// trainers' side once, at declare time (agent/control/tensor_placement.h reads it).
std::map<uint64_t, bool> deviceCoded(ReductionEngine& engine, uint64_t job, const std::vector<TensorSpec>& specs) {
  auto declared = engine.declareJob(job, specs);
  EXPECT_TRUE(declared.ok()) << declared.status().message();
  std::map<uint64_t, bool> out;
  if (declared.ok())
    for (const DeclaredTensor& t : *declared) out[t.key] = t.device_coded;
  return out;
}

TEST(ReductionEngineTest, NoneAndTheSelectionCodecsAreStagedOffTheGpuByDefault) {
  const uint64_t job = jobIdOf("staged");
  const std::vector<TensorSpec> specs = {{1, 5000, 0, {"topk", {}}, {}}, {2, 5000, 0, {"2bit", {}}, {}},
                                         {3, 5000, 0, {"dgc", {}}, {}}, {4, 5000, 0, {"threshold", {}}, {}},
                                         {5, 5000, 0, {}, {}}};
  Cluster c(2, smallSlices());
  ASSERT_TRUE(c.engine(1).declareJob(job, specs).ok());
  // The default codec (none) is staged too: the host sends it from pinned memory as it is.
  EXPECT_EQ(deviceCoded(c.engine(0), job, specs),
            (std::map<uint64_t, bool>{{1, false}, {2, true}, {3, false}, {4, false}, {5, false}}));
  EngineOptions all = smallSlices();
  all.gpu_staged_codecs.clear();
  Cluster every(2, all);
  EXPECT_TRUE(deviceCoded(every.engine(0), job, specs).at(1));
  EXPECT_TRUE(deviceCoded(every.engine(0), job, specs).at(5));
  // A node on its own only averages: on the GPU whatever the codec.
  Cluster one(1, smallSlices());
  EXPECT_TRUE(deviceCoded(one.engine(0), job, specs).at(3));
}

void errorFeedbackConverges(std::vector<bool> coded) {
  // With 2bit both ways each step is coarse, but what is not sent stays in the residuals:
  // the running mean of the outputs approaches the true average.
  EngineOptions o = smallSlices();
  o.default_codec = {"2bit", {{"threshold", "0.25"}}};
  Cluster c(2, o, coded);
  const uint64_t job = jobIdOf("ef");
  const uint64_t n = 2000;
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{1, n, 0, {}, {}}}).ok());
  std::vector<double> sum(n, 0.0);
  const int steps = 400;
  for (int it = 1; it <= steps; ++it) {
    std::vector<std::vector<float>> g(2, std::vector<float>(n));
    for (uint32_t r = 0; r < 2; ++r)
      for (uint64_t i = 0; i < n; ++i) g[r][i] = 0.1f * valueOf(r, 0, 1, i);  // the same gradient every step
    for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).reduce(job, it, 1, {g[r].data()}, c.coder(r)).ok());
    c.pump();
    for (uint64_t i = 0; i < n; ++i) sum[i] += g[0][i];
    for (uint32_t r = 0; r < 2; ++r) c.done(r).clear();
  }
  double worst = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double expected = 0.05 * (valueOf(0, 0, 1, i) + valueOf(1, 0, 1, i));
    worst = std::max(worst, std::abs(sum[i] / steps - expected));
  }
  // Residuals stay bounded, so the mean error shrinks like (threshold * nodes) / steps.
  EXPECT_LT(worst, 4 * 0.25 / steps * 2 + 1e-4);
}

TEST(ReductionEngineTest, ErrorFeedbackMakesTheRunningSumConverge) { errorFeedbackConverges({}); }

TEST(ReductionEngineTest, ErrorFeedbackConvergesWithResidualsInTheCoder) { errorFeedbackConverges({true, true}); }

TEST(ReductionEngineTest, ACoderThatRejectsTheGradientFailsTheKeyAndTheNextIterationWorks) {
  EngineOptions o = smallSlices();
  o.default_codec = {"qsgd", {}};
  Cluster c(2, o, {true, false});
  const uint64_t job = jobIdOf("overflowing-norm");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{3, 2000, 0, {}, {}}}).ok());
  std::vector<float> a(2000, 0.5f), b(2000, 0.25f);
  // In a slice node 0 sends: the ones it owns go exact, and their owner's codec rejects them.
  const uint32_t sent_slice = c.engine(0).membership().ownerOf(3, 0) == 1 ? 0 : 1;
  ASSERT_EQ(c.engine(0).membership().ownerOf(3, sent_slice), 1u);
  // Finite, but their bucket's norm is past fp32's range, which qsgd's header cannot hold.
  a[sent_slice * 1000 + 500] = a[sent_slice * 1000 + 501] = 3e38f;
  ASSERT_TRUE(c.engine(0).reduce(job, 1, 3, {a.data()}, c.coder(0)).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 1, 3, {b.data()}, c.coder(1)).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 1u);
  EXPECT_FALSE(c.done(0)[0].status.ok());
  EXPECT_NE(c.done(0)[0].status.message().find("encoding on staged host: "), std::string::npos) << c.done(0)[0].status.toString();
  EXPECT_NE(c.done(0)[0].status.message().find("qsgd"), std::string::npos) << c.done(0)[0].status.toString();
  // The other node's reduction cannot finish without node 0; it is failed as the agent would
  // on the job's loss, and both go on with the next iteration.
  c.engine(1).failJob(job, Status::unavailable("node 0 failed iteration 1"));
  c.pump();
  for (uint32_t r = 0; r < 2; ++r) c.done(r).clear();
  std::fill(a.begin(), a.end(), 0.5f);
  std::fill(b.begin(), b.end(), 0.25f);
  ASSERT_TRUE(c.engine(0).reduce(job, 2, 3, {a.data()}, c.coder(0)).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 2, 3, {b.data()}, c.coder(1)).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 1u);
  ASSERT_EQ(c.done(1).size(), 1u);
  EXPECT_TRUE(c.done(0)[0].status.ok()) << c.done(0)[0].status.toString();
  EXPECT_TRUE(c.done(1)[0].status.ok()) << c.done(1)[0].status.toString();
  EXPECT_EQ(a, b);
}

TEST(ReductionEngineTest, SlicesThatArriveBeforeTheJobAreReplayed) {
  Cluster c(2, smallSlices());
  const uint64_t job = jobIdOf("late");
  std::vector<TensorSpec> specs = {{5, 4000, 0, {}, {}}};
  ASSERT_TRUE(c.engine(0).declareJob(job, specs).ok());
  std::vector<float> a(4000, 1.0f), b(4000, 3.0f);
  ASSERT_TRUE(c.engine(0).reduce(job, 1, 5, {a.data()}).ok());
  c.pump();
  EXPECT_TRUE(c.done(0).empty());
  ASSERT_TRUE(c.engine(1).declareJob(job, specs).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 1, 5, {b.data()}).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 1u);
  ASSERT_EQ(c.done(1).size(), 1u);
  EXPECT_EQ(a, std::vector<float>(4000, 2.0f));
  EXPECT_EQ(b, std::vector<float>(4000, 2.0f));
}

// A shim that declares tensors as it meets them (MXNet's per-key broadcast) makes one node
// re-declare with a new key before its peer does: the peer keeps those slices until its own
// declaration names the key.
TEST(ReductionEngineTest, SlicesOfATensorDeclaredThereFirstAreReplayed) {
  Cluster c(2, smallSlices());
  const uint64_t job = jobIdOf("growing");
  const std::vector<TensorSpec> first = {{5, 4000, 0, {}, {}}};
  const std::vector<TensorSpec> both = {{5, 4000, 0, {}, {}}, {6, 3000, -1, {}, {}}};
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, first).ok());
  ASSERT_TRUE(c.engine(0).declareJob(job, both).ok());
  std::vector<float> a(3000, 1.0f), b(3000, 5.0f);
  ASSERT_TRUE(c.engine(0).reduce(job, 1, 6, {a.data()}).ok());
  c.pump();
  EXPECT_TRUE(c.done(0).empty());
  EXPECT_EQ(c.engine(1).counters().bad_messages, 0u);
  ASSERT_TRUE(c.engine(1).declareJob(job, both).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 1, 6, {b.data()}).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 1u);
  ASSERT_EQ(c.done(1).size(), 1u);
  EXPECT_TRUE(c.done(0)[0].status.ok() && c.done(1)[0].status.ok());
  EXPECT_EQ(a, std::vector<float>(3000, 3.0f));
  EXPECT_EQ(b, std::vector<float>(3000, 3.0f));
}

TEST(ReductionEngineTest, MismatchedCodecsAreRejectedNotMisdecoded) {
  const std::string why = refusedWhenDeclaredApart({5, 4000, 0, {"2bit", {}}, {}}, {5, 4000, 0, {"none", {}}, {}});
  EXPECT_NE(why.find("codec differs from"), std::string::npos) << why;
}

TEST(ReductionEngineTest, IterationsAreCheckedAndPeerLossFailsInFlightWork) {
  Cluster c(2, smallSlices());
  const uint64_t job = jobIdOf("fail");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{5, 4000, 0, {}, {}}}).ok());
  std::vector<float> a(4000, 1.0f);
  ASSERT_TRUE(c.engine(0).reduce(job, 3, 5, {a.data()}).ok());
  Status again = c.engine(0).reduce(job, 4, 5, {a.data()});
  EXPECT_EQ(again.message(), "tensor 5 is still reducing iteration 3");
  EXPECT_EQ(c.engine(0).reduce(job, 1, 77, {a.data()}).message(), "tensor 77 is not declared");
  c.engine(0).onPeerDown(1, Status::unavailable("gone"));
  c.settleCoders();  // a failure is reported once the coder holds nothing of it
  ASSERT_EQ(c.done(0).size(), 1u);
  EXPECT_EQ(c.done(0)[0].status.message(), "peer rank 1 lost: gone");
  EXPECT_EQ(c.engine(0).reduce(job, 3, 5, {a.data()}).message(), "tensor 5: iteration 3 is not after iteration 3");
}

TEST(ReductionEngineTest, PeerLossWhileTheCoderEncodesFailsOnceAndTheLateReportIsIgnored) {
  Cluster c(2, smallSlices(), {true, true});
  const uint64_t job = jobIdOf("fail-coded");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{5, 4000, 0, {}, {}}}).ok());
  std::vector<float> a(4000, 1.0f);
  ASSERT_TRUE(c.engine(0).reduce(job, 3, 5, {a.data()}, c.coder(0)).ok());
  c.engine(0).onPeerDown(1, Status::unavailable("gone"));  // before the coder has reported
  c.settleCoders();  // the failure is reported once the encode is dropped
  ASSERT_EQ(c.done(0).size(), 1u);
  EXPECT_EQ(c.done(0)[0].status.message(), "peer rank 1 lost: gone");
  c.pump();  // the encodings arrive for a reduction that has ended
  EXPECT_EQ(c.done(0).size(), 1u);
  EXPECT_EQ(c.gauge(0, metrics::Id::send_queue, {"1"}), 0u);
  EXPECT_EQ(c.engine(0).counters().wire_bytes_sent, 0u);
  // The next iteration runs on the coder again (the peer is back).
  std::vector<float> b(4000, 3.0f);
  ASSERT_TRUE(c.engine(0).reduce(job, 4, 5, {a.data()}, c.coder(0)).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 4, 5, {b.data()}, c.coder(1)).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 2u);
  EXPECT_TRUE(c.done(0)[1].status.ok()) << c.done(0)[1].status.toString();
  EXPECT_EQ(a, std::vector<float>(4000, 2.0f));
  EXPECT_EQ(b, a);
}

// The decodes of results that reached a node before its step failed are still queued on the
// coder: the trainers hear of the failure only once none of them will write their buffers,
// where they put the next step's gradients as soon as they hear.
void failedStepLeavesTheBuffersAlone(std::vector<bool> coded, const char* codec) {
  EngineOptions o = smallSlices();
  o.default_codec = {codec, {}};
  o.min_elements = 0;
  Cluster c(2, o, coded);
  const uint64_t job = jobIdOf("fenced");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{5, 4000, 0, {}, {}}}).ok());
  std::vector<float> a(4000, 1.0f), b(4000, 3.0f);
  c.freeze(0, true);  // node 1 encodes, merges its slices and sends node 0 their results
  ASSERT_TRUE(c.engine(0).reduce(job, 3, 5, {a.data()}, c.coder(0)).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 3, 5, {b.data()}, c.coder(1)).ok());
  c.pump();
  c.freeze(0, false);
  c.deliver(0);  // node 0 queues the decodes of those results, and nothing runs them yet
  c.engine(0).onPeerDown(1, Status::unavailable("gone"));
  for (int round = 0; round < 100 && c.done(0).empty(); ++round) c.settleCoders();
  ASSERT_EQ(c.done(0).size(), 1u);
  EXPECT_EQ(c.done(0)[0].status.message(), "peer rank 1 lost: gone");
  const float sentinel = -7.5f;  // the trainer's next step, written the moment it heard
  std::fill(a.begin(), a.end(), sentinel);
  c.pump();
  EXPECT_EQ(std::count(a.begin(), a.end(), sentinel), 4000) << "the failed step wrote the trainer's buffer";
}

TEST(ReductionEngineTest, AFailedStepWritesNothingIntoTheBuffersAfterItIsReported) {
  failedStepLeavesTheBuffersAlone({}, "2bit");
  failedStepLeavesTheBuffersAlone({}, "none");
}

TEST(ReductionEngineTest, AFailedStepOnACoderThatCannotDropItsWorkWaitsForIt) {
  failedStepLeavesTheBuffersAlone({true, true}, "2bit");
}

TEST(ReductionEngineTest, NodesMayDisagreeOnCompressingAndStillSumCorrectly) {
  // Node 0 compresses with fp16, node 1 finds the tensor too small to compress: every slice
  // names its codec, so the owners decode each contribution with the right one.
  const uint64_t job = jobIdOf("mixed");
  auto transports = transport::makeLoopbackGroup(2);
  asio::io_context io;
  HostCoders host(io);
  std::vector<std::unique_ptr<ReductionEngine>> engines;
  std::vector<int> completed(2, 0);
  for (uint32_t r = 0; r < 2; ++r) {
    EngineOptions o = smallSlices();
    o.host_stream = host.stream();
    o.default_codec = {"fp16", {}};
    o.min_elements = r == 0 ? 0 : 1000000;
    engines.push_back(std::make_unique<ReductionEngine>(*transports[r], o,
                                                        [&completed, r](uint64_t, uint64_t, uint64_t, const Status& s, std::optional<uint32_t>) {
                                                          EXPECT_TRUE(s.ok()) << s.toString();
                                                          ++completed[r];
                                                        }));
    ReductionEngine* e = engines.back().get();
    transports[r]->setHandlers([e](const transport::Message& m) { e->onMessage(m); }, nullptr);
    ASSERT_TRUE(transports[r]->connect({}).ok());
    ASSERT_TRUE(e->declareJob(job, {{9, 5000, 0, {}, {}}}).ok());
  }
  // Node 0's size rule compresses the tensor, node 1's does not.
  EXPECT_EQ(engines[0]->stats().gauge(metrics::Id::planned_tensors, {"compressed"}).Value(), 1);
  EXPECT_EQ(engines[1]->stats().gauge(metrics::Id::planned_tensors, {"uncompressed"}).Value(), 1);
  std::vector<float> a(5000), b(5000);
  for (uint64_t i = 0; i < 5000; ++i) a[i] = valueOf(0, 1, 9, i), b[i] = valueOf(1, 1, 9, i);
  std::vector<float> want(5000);
  for (uint64_t i = 0; i < 5000; ++i) want[i] = 0.5f * (a[i] + b[i]);
  ASSERT_TRUE(engines[0]->reduce(job, 1, 9, {a.data()}).ok());
  ASSERT_TRUE(engines[1]->reduce(job, 1, 9, {b.data()}).ok());
  for (int i = 0; i < 50; ++i) {
    for (auto& t : transports) t->progress();
    host.poll();
  }
  EXPECT_EQ(completed, (std::vector<int>{1, 1}));
  EXPECT_EQ(a, b);
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_NEAR(a[i], want[i], 1e-3) << i;
  EXPECT_EQ(engines[0]->counters().bad_messages + engines[1]->counters().bad_messages, 0u);
}

void switchingToUncompressedDeliversEverythingOwed(std::vector<bool> coded) {
  // Auto selection over a slow link compresses (2bit, coarse); once the link looks fast the
  // planner switches to uncompressed, and that slice carries its residual along: from then
  // on the outputs' running sum equals the inputs' exactly (up to fp32 rounding).
  EngineOptions o = smallSlices();
  o.default_codec = {"2bit", {{"threshold", "0.25"}}};
  o.selection = scheduler::Selection::kAuto;
  o.refit_interval = 3600;
  Cluster c(2, o, coded);
  const auto now = scheduler::Planner::Clock::now();
  for (uint32_t r = 0; r < 2; ++r) {
    for (int i = 0; i < 64; ++i) c.planner(r).recordWire(i % 2 ? 40000 : 400000, (i % 2 ? 40000 : 400000) / 1e6);
    ASSERT_TRUE(c.planner(r).maybeRefit(now));
  }
  const uint64_t job = jobIdOf("switch");
  const uint64_t n = 100000;
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{1, n, 0, {}, {}}}).ok());
  ASSERT_EQ(c.gauge(0, metrics::Id::planned_tensors, {"compressed"}), 1);
  std::vector<double> in_sum(n, 0.0), out_sum(n, 0.0);
  auto step = [&](int it) {
    std::vector<std::vector<float>> g(2, std::vector<float>(n));
    for (uint32_t r = 0; r < 2; ++r)
      for (uint64_t i = 0; i < n; ++i) g[r][i] = 0.1f * valueOf(r, it, 1, i);
    for (uint64_t i = 0; i < n; ++i) in_sum[i] += 0.5 * (static_cast<double>(g[0][i]) + g[1][i]);
    for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).reduce(job, it, 1, {g[r].data()}, c.coder(r)).ok());
    c.pump();
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_EQ(c.done(r).size(), 1u);
      EXPECT_TRUE(c.done(r)[0].status.ok());
      c.done(r).clear();
    }
    EXPECT_EQ(g[0], g[1]);
    for (uint64_t i = 0; i < n; ++i) out_sum[i] += g[0][i];
  };
  for (int it = 1; it <= 5; ++it) step(it);
  double compressed_gap = 0;
  for (uint64_t i = 0; i < n; ++i) compressed_gap = std::max(compressed_gap, std::abs(out_sum[i] - in_sum[i]));
  EXPECT_GT(compressed_gap, 0.01) << "2bit at threshold 0.25 must still owe something";
  for (uint32_t r = 0; r < 2; ++r) {
    for (int i = 0; i < 4000; ++i) c.planner(r).recordWire(i % 2 ? 40000 : 400000, 1e-6);
    ASSERT_TRUE(c.planner(r).maybeRefit(now + std::chrono::hours(2)));
  }
  step(6);
  EXPECT_EQ(c.gauge(0, metrics::Id::planned_tensors, {"uncompressed"}), 1) << "re-planned with the fast link";
  double gap = 0;
  for (uint64_t i = 0; i < n; ++i) gap = std::max(gap, std::abs(out_sum[i] - in_sum[i]));
  EXPECT_LT(gap, 1e-5);
}

TEST(ReductionEngineTest, SwitchingToUncompressedDeliversEverythingOwed) {
  switchingToUncompressedDeliversEverythingOwed({});
}

TEST(ReductionEngineTest, SwitchingToUncompressedFlushesTheCodersResiduals) {
  switchingToUncompressedDeliversEverythingOwed({true, false});
}

// ---- aggregation policies and results (agent/engine/reduction_policy.h)

// Values of very different magnitudes, so an fp32 sum depends on its order.
float roughValueOf(uint32_t trainer, uint64_t iteration, uint64_t key, uint64_t i) {
  const float v = valueOf(trainer, iteration, key, i);
  return std::ldexp(v, static_cast<int>((trainer * 7 + i) % 30) - 15);
}

// A node's local sum as the engine defines it: fp32, in local rank order.
float localSum(uint32_t node, uint32_t local, uint64_t it, uint64_t key, uint64_t i,
               float (*value)(uint32_t, uint64_t, uint64_t, uint64_t)) {
  float s = value(node * local, it, key, i);
  for (uint32_t l = 1; l < local; ++l) s += value(node * local + l, it, key, i);
  return s;
}

// MXNet's 2bit rule (src/operator/contrib/two_bit_quantize-inl.h, quantize_2bit): the
// residual takes the gradient; at or above +t the node sends +t and keeps the rest, at or
// below -t it sends -t, else 0.
float mxnet2bit(float gradient, float& residual, float t) {
  residual += gradient;
  if (residual >= t) {
    residual -= t;
    return t;
  }
  if (residual <= -t) {
    residual += t;
    return -t;
  }
  return 0.0f;
}

void expectBitEqual(float got, float want, const std::string& where) {
  EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << where << ": " << got << " vs " << want;
}

TEST(ReductionEngineTest, SumsAreExactInRankOrderWhateverTheArrivalOrder) {
  // Codec none: the caller gets ((n0 + n1) + n2) + ... in fp32, each node's share its local
  // sum in local rank order; never a division then a multiplication.
  for (uint32_t nodes : {2u, 3u, 4u}) {
    for (bool coded : {false, true}) {
      SCOPED_TRACE(::testing::Message() << nodes << " nodes, coded " << coded);
      const uint32_t local = nodes == 3 ? 2 : 1;
      const std::vector<uint64_t> sizes = {1, 7, 1000, 2501};
      Cluster c(nodes, smallSlices(), std::vector<bool>(nodes, coded));
      const Seen seen = runPolicy(c, local, sizes, 3, {"none", {}}, {Aggregation::kBidirectional, ResultKind::kSum, {}},
                                  roughValueOf);
      for (int it = 1; it <= 3; ++it)
        for (size_t k = 0; k < sizes.size(); ++k)
          for (uint64_t i = 0; i < sizes[k]; ++i) {
            float want = localSum(0, local, it, 100 + k, i, roughValueOf);
            for (uint32_t r = 1; r < nodes; ++r) want += localSum(r, local, it, 100 + k, i, roughValueOf);
            for (uint32_t r = 0; r < nodes; ++r)
              for (uint32_t l = 0; l < local; ++l)
                expectBitEqual(seen[it - 1][r][l][k][i], want,
                               ::testing::PrintToString(std::tuple{it, r, l, k, i}));
            if (::testing::Test::HasFailure()) return;
          }
      EXPECT_EQ(c.gauge(0, metrics::Id::pending_sums), 0);
    }
  }
}

TEST(ReductionEngineTest, AnAverageIsOneDivisionOfTheSum) {
  const uint32_t nodes = 3, local = 1;
  const std::vector<uint64_t> sizes = {1000, 17};
  Cluster c(nodes, smallSlices());
  const Seen seen = runPolicy(c, local, sizes, 2, {"none", {}}, {}, roughValueOf);
  for (int it = 1; it <= 2; ++it)
    for (size_t k = 0; k < sizes.size(); ++k)
      for (uint64_t i = 0; i < sizes[k]; ++i) {
        float sum = 0;
        for (uint32_t r = 0; r < nodes; ++r) sum += roughValueOf(r, it, 100 + k, i);
        expectBitEqual(seen[it - 1][1][0][k][i], sum / 3.0f, ::testing::PrintToString(std::tuple{it, k, i}));
        if (::testing::Test::HasFailure()) return;
      }
}

// The mxnet policy against a model of MXNet's dist_sync: each node quantizes its local sum
// with its own residual (the owner too), the owner adds the dequantized shares in rank
// order, and every trainer gets that sum, uncompressed.
void mxnetPolicyMatchesDistSync(uint32_t nodes, uint32_t local, std::vector<bool> coded) {
  const float t = 0.5f;
  const std::vector<uint64_t> sizes = {1, 17, 999, 2501};
  const int iterations = 4;
  Cluster c(nodes, smallSlices(), coded);
  const Seen seen = runPolicy(c, local, sizes, iterations, {"2bit", {{"threshold", "0.5"}}},
                              {Aggregation::kMxnet, ResultKind::kSum, {}});
  // residual[node][key][i]
  std::vector<std::vector<std::vector<float>>> residual(nodes);
  for (auto& r : residual)
    for (uint64_t n : sizes) r.emplace_back(n, 0.0f);
  for (int it = 1; it <= iterations; ++it)
    for (size_t k = 0; k < sizes.size(); ++k)
      for (uint64_t i = 0; i < sizes[k]; ++i) {
        float want = 0;
        for (uint32_t r = 0; r < nodes; ++r) {
          const float sent = mxnet2bit(localSum(r, local, it, 100 + k, i, valueOf), residual[r][k][i], t);
          want = r == 0 ? sent : want + sent;
        }
        for (uint32_t r = 0; r < nodes; ++r)
          for (uint32_t l = 0; l < local; ++l)
            expectBitEqual(seen[it - 1][r][l][k][i], want, ::testing::PrintToString(std::tuple{it, r, l, k, i}));
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(ReductionEngineTest, MxnetPolicyMatchesAModelOfDistSync) {
  mxnetPolicyMatchesDistSync(2, 1, {});
  mxnetPolicyMatchesDistSync(2, 2, {});
  mxnetPolicyMatchesDistSync(3, 2, {});
  mxnetPolicyMatchesDistSync(1, 2, {});  // a lone node still quantizes, as a one-worker dist_sync
}

TEST(ReductionEngineTest, MxnetPolicyOnCodedNodesGivesTheSameBits) {
  mxnetPolicyMatchesDistSync(2, 2, {true, true});
  mxnetPolicyMatchesDistSync(3, 1, {true, false, true});
  mxnetPolicyMatchesDistSync(1, 2, {true});
}

TEST(ReductionEngineTest, MxnetPolicyCompressesEveryKeyAndSendsResultsUncompressed) {
  EngineOptions o = smallSlices();
  o.min_elements = 1u << 20;  // the size rule would leave every key here uncompressed
  const uint64_t job = jobIdOf("every-key");
  Cluster c(2, o);
  for (uint32_t r = 0; r < 2; ++r)
    ASSERT_TRUE(c.engine(r)
                    .declareJob(job, {{1, 3000, 0, {"2bit", {}}, {Aggregation::kMxnet, ResultKind::kSum, {}}},
                                      {2, 3000, 0, {"2bit", {}}, {}}})
                    .ok());
  // Tensor 1 (mxnet) compressed whatever its size, tensor 2 left to the size rule.
  EXPECT_EQ(c.gauge(0, metrics::Id::planned_tensors, {"compressed"}), 1);
  EXPECT_EQ(c.gauge(0, metrics::Id::planned_tensors, {"uncompressed"}), 1);
  std::vector<float> a(3000, 0.75f), b(3000, -0.25f);
  ASSERT_TRUE(c.engine(0).reduce(job, 1, 1, {a.data()}).ok());
  ASSERT_TRUE(c.engine(1).reduce(job, 1, 1, {b.data()}).ok());
  c.pump();
  ASSERT_EQ(c.done(0).size(), 1u);
  EXPECT_EQ(a, std::vector<float>(3000, 0.5f));  // 0.5 from node 0, 0 from node 1
  EXPECT_EQ(b, a);
  // Contributions leave as 2bit (16 values per float); results as fp32, 4 bytes per element.
  const auto& sent0 = c.engine(0).counters();
  const auto& sent1 = c.engine(1).counters();
  // Per slice of 1000: the non-owner's share (2 bits each) and the result to the non-owner.
  EXPECT_EQ(sent0.wire_bytes_sent + sent1.wire_bytes_sent, 3 * ((1000 + 15) / 16 * 4 + 1000 * 4));
}

TEST(ReductionEngineTest, NodesThatDisagreeOnTheAggregationAreRejected) {
  const std::string why = refusedWhenDeclaredApart({5, 4000, 0, {"2bit", {}}, {Aggregation::kMxnet, ResultKind::kSum, {}}},
                                                   {5, 4000, 0, {"2bit", {}}, {}});
  EXPECT_NE(why.find("(aggregation mxnet)"), std::string::npos) << why;
}

}  // namespace
}  // namespace gcagent::agent
