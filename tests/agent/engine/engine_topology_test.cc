// The ring (CaSync-Ring) and allgather topologies in the reduction engine: N agents over
// loopback; results checked against sums made here (in ring order, or in rank order), bit
// for bit, and every node and trainer seeing the same bytes for every codec.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "agent/engine/reduction_engine.h"
#include "compress/registry.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/agent/engine/engine_runs.h"

namespace gcagent::agent {
namespace {

constexpr uint64_t kSlice = 1000;

EngineOptions optionsFor(Topology topology) {
  EngineOptions o = smallSlices();
  o.topology = topology;
  return o;
}
EngineOptions ringOptions() { return optionsFor(Topology::kRing); }
EngineOptions allgatherOptions() { return optionsFor(Topology::kAllgather); }

const std::vector<std::string> kCodecs = {"none", "fp16",    "bf16", "2bit", "1bit", "onebit",
                                          "terngrad", "qsgd", "randomk", "topk", "dgc", "threshold"};

// The node whose local sum is added `hop`-th (from 0) into slice sums owned by `owner`.
using SumOrder = std::function<uint32_t(uint32_t owner, uint32_t hop, uint32_t nodes)>;

// With none, every trainer's buffer holds the fp32 sum of the nodes' local sums in `order`
// (each local sum in local-rank order), divided once: checked bit for bit on 2-5 nodes with
// 1 and 2 trainers each.
void expectExactSumsIn(Topology topology, const SumOrder& order) {
  for (uint32_t nodes : {2u, 3u, 4u, 5u})
    for (uint32_t local : {1u, 2u}) {
      SCOPED_TRACE(testing::Message() << nodes << " nodes, " << local << " trainers each");
      Cluster c(nodes, optionsFor(topology));
      const std::vector<uint64_t> sizes = {1, 7, 999, 1000, 1001, 12345};
      std::vector<std::vector<float>> seen;  // by iteration, then key
      runAndCheck(c, local, sizes, 2, 1e-6, "none", &seen);
      const uint32_t world = nodes * local;
      for (int it = 1; it <= 2; ++it)
        for (size_t k = 0; k < sizes.size(); ++k) {
          const uint64_t key = 100 + k;
          const std::vector<float>& got = seen[(it - 1) * sizes.size() + k];
          for (uint64_t i = 0; i < sizes[k]; ++i) {
            const uint32_t owner = c.engine(0).membership().ownerOf(key, static_cast<uint32_t>(i / kSlice));
            auto node_sum = [&](uint32_t r) {
              float s = valueOf(r * local, it, key, i);
              for (uint32_t l = 1; l < local; ++l) s += valueOf(r * local + l, it, key, i);
              return s;
            };
            float sum = node_sum(order(owner, 0, nodes));
            for (uint32_t hop = 1; hop < nodes; ++hop) sum += node_sum(order(owner, hop, nodes));
            const float expected = sum / static_cast<float>(world);
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected))
                << "key " << key << " element " << i << " iteration " << it << ": " << got[i] << " vs " << expected;
          }
        }
      EXPECT_EQ(c.gauge(0, metrics::Id::pending_sums), 0);
    }
}

// Every codec, 2-5 nodes, 1-2 trainers: every node and trainer sees the same bytes (the
// bound is the codecs' tests' business; runAndCheck asserts the agreement).
void expectEveryCodecAgrees(Topology topology) {
  for (const std::string& codec : kCodecs)
    for (uint32_t nodes : {2u, 3u, 4u, 5u})
      for (uint32_t local : {1u, 2u}) {
        SCOPED_TRACE(testing::Message() << codec << ", " << nodes << " nodes, " << local << " trainers each");
        Cluster c(nodes, optionsFor(topology));
        runAndCheck(c, local, {3000, 17, 2048}, 2, 8.0, codec);
        EXPECT_EQ(c.gauge(0, metrics::Id::pending_sums), 0);
      }
}

TEST(EngineRing, NoneIsTheExactSumInRingOrder) {
  // Slice s is summed from its owner's successor round to its owner.
  expectExactSumsIn(Topology::kRing, [](uint32_t owner, uint32_t hop, uint32_t nodes) {
    return (owner + 1 + hop) % nodes;
  });
}

TEST(EngineRing, EachNodeSendsToItsSuccessorOnly) {
  Cluster c(4, ringOptions());
  runAndCheck(c, 1, {4000, 17, 2501}, 2, 1e-6, "none");
  for (uint32_t from = 0; from < 4; ++from)
    for (uint32_t to = 0; to < 4; ++to) {
      if (to == from) continue;
      if (to == (from + 1) % 4) {
        EXPECT_GT(c.sent(from, to), 0u) << from << " -> " << to;
      } else {
        EXPECT_EQ(c.sent(from, to), 0u) << from << " -> " << to << ": not a neighbour";
      }
    }
}

TEST(EngineRing, EveryCodecGivesEveryNodeTheSameBytes) {
  // Each hop re-encodes its partial sum with its own residual; the owner encodes the total
  // once and that encoding is forwarded as received, so every node decodes the same bytes.
  expectEveryCodecAgrees(Topology::kRing);
}

TEST(EngineRing, CodedNodesGiveTheHostNodesBytes) {
  // A node's side on a coder that stages like a GPU's gives the bytes of the host's.
  for (const char* codec : {"none", "fp16", "2bit", "dgc"}) {
    SCOPED_TRACE(codec);
    std::vector<std::vector<float>> on_host, mixed;
    Cluster host(3, ringOptions());
    runAndCheck(host, 2, {3000, 17}, 2, 8.0, codec, &on_host);
    Cluster both(3, ringOptions(), {true, false, true});
    runAndCheck(both, 2, {3000, 17}, 2, 8.0, codec, &mixed);
    ASSERT_EQ(on_host.size(), mixed.size());
    for (size_t i = 0; i < on_host.size(); ++i)
      EXPECT_EQ(0, std::memcmp(on_host[i].data(), mixed[i].data(), on_host[i].size() * sizeof(float))) << i;
  }
}

TEST(EngineRing, ErrorFeedbackOnEveryHopMakesTheRunningMeanConverge) {
  // 2bit everywhere: each hop sends at most the threshold per element and keeps the rest in
  // its residual, so the running mean of the results approaches the true average. Gradients
  // are kept below threshold / nodes so that every partial sum can be carried on average.
  const uint32_t nodes = 4;
  const float t = 0.25f;
  EngineOptions o = ringOptions();
  o.default_codec = {"2bit", {{"threshold", "0.25"}}};
  Cluster c(nodes, o);
  const uint64_t job = jobIdOf("ef-ring");
  const uint64_t n = 3000;
  for (uint32_t r = 0; r < nodes; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{1, n, 0, {}, {}}}).ok());
  std::vector<double> sum(n, 0.0);
  const int steps = 400;
  std::vector<std::vector<float>> g(nodes, std::vector<float>(n));
  for (int it = 1; it <= steps; ++it) {
    for (uint32_t r = 0; r < nodes; ++r)
      for (uint64_t i = 0; i < n; ++i) g[r][i] = 0.05f * valueOf(r, 0, 1, i);  // the same every step
    for (uint32_t r = 0; r < nodes; ++r) ASSERT_TRUE(c.engine(r).reduce(job, it, 1, {g[r].data()}).ok());
    c.pump();
    for (uint32_t r = 0; r < nodes; ++r) {
      ASSERT_EQ(c.done(r).size(), 1u) << "iteration " << it;
      c.done(r).clear();
    }
    for (uint64_t i = 0; i < n; ++i) sum[i] += g[0][i];
  }
  double worst = 0, quantum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    double expected = 0;
    for (uint32_t r = 0; r < nodes; ++r) expected += 0.05 * valueOf(r, 0, 1, i);
    expected /= nodes;
    worst = std::max(worst, std::abs(sum[i] / steps - expected));
    quantum = std::max(quantum, std::abs(expected));
  }
  // What was not delivered sits in the residuals: the nodes', the hops' and the result's,
  // each within about twice the threshold; spread over the steps and divided by the nodes.
  const double bound = (2.0 * nodes) * 2 * t / nodes / steps;
  EXPECT_LT(worst, bound) << "a single step's quantisation error would be about " << t / nodes;
  EXPECT_GT(quantum, 10 * bound) << "the bound must be tighter than the values";
}

TEST(EngineRing, ATensorMayChooseTheRingUnderAParameterServerDefault) {
  // reduce.topology=ring on one tensor: it travels by ring, the others by ps.
  Cluster c(3, smallSlices());
  const uint64_t job = jobIdOf("mixed");
  ReductionPolicy ring;
  ring.topology = Topology::kRing;
  const std::vector<TensorSpec> specs = {{1, 5000, 0, {"none", {}}, ring}, {2, 5000, 0, {"none", {}}, {}}};
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, specs).ok());
  std::vector<std::vector<float>> a(3, std::vector<float>(5000)), b(3, std::vector<float>(5000));
  for (uint32_t r = 0; r < 3; ++r)
    for (uint64_t i = 0; i < 5000; ++i) a[r][i] = b[r][i] = valueOf(r, 1, 1, i);
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(c.engine(r).reduce(job, 1, 1, {a[r].data()}).ok());
    ASSERT_TRUE(c.engine(r).reduce(job, 1, 2, {b[r].data()}).ok());
  }
  c.pump();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(c.done(r).size(), 2u);
    for (const Done& d : c.done(r)) EXPECT_TRUE(d.status.ok()) << d.status.toString();
    EXPECT_EQ(a[r], a[0]);
    EXPECT_EQ(b[r], b[0]);
  }
  for (uint64_t i = 0; i < 5000; ++i) {
    const double exact = (double{valueOf(0, 1, 1, i)} + valueOf(1, 1, 1, i) + valueOf(2, 1, 1, i)) / 3;
    ASSERT_NEAR(a[0][i], exact, 1e-6);
    ASSERT_NEAR(b[0][i], exact, 1e-6);
  }
}

TEST(EngineRing, NodesThatDisagreeOnTheTopologyRefuseEachOthersSlices) {
  ReductionPolicy ring;
  ring.topology = Topology::kRing;
  const std::string why = refusedWhenDeclaredApart({5, 4000, 0, {"none", {}}, ring}, {5, 4000, 0, {"none", {}}, {}});
  EXPECT_NE(why.find("tensor 5 travels by ring there, by ps here"), std::string::npos) << why;
}

TEST(EngineRing, TheMxnetPolicyIsRefusedOnARing) {
  Cluster c(2, ringOptions());
  const Status s =
      c.engine(0).declareJob(jobIdOf("mx"), {{5, 4000, 0, {"2bit", {}}, {Aggregation::kMxnet, ResultKind::kAverage, {}}}}).status();
  EXPECT_EQ(s.message(), "tensor 5: aggregation mxnet is a parameter server's; it cannot travel by ring (use "
                         "reduce.topology=ps, or the bidirectional aggregation)");
}

// `rounds`: how far the reduction gets before the loss (not to its end).
void aPeerLostMidReductionFailsItOnEveryNode(EngineOptions options, int rounds) {
  Cluster c(4, options);
  const uint64_t job = jobIdOf("lost");
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{5, 8000, 0, {"2bit", {}}, {}}}).ok());
  std::vector<std::vector<float>> g(4, std::vector<float>(8000, 0.5f));
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.engine(r).reduce(job, 1, 5, {g[r].data()}).ok());
  c.pump(rounds);
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.done(r).empty()) << "node " << r << " finished before the loss";
  for (uint32_t r = 0; r < 4; ++r)
    if (r != 2) c.cut(r, 2, true);
  for (uint32_t r = 0; r < 4; ++r)
    if (r != 2) c.engine(r).onPeerDown(2, Status::deadlineExceeded("nothing heard for 2 s"));
  c.pump();
  for (uint32_t r = 0; r < 4; ++r) {
    if (r == 2) continue;
    ASSERT_EQ(c.done(r).size(), 1u) << "node " << r;
    EXPECT_EQ(c.done(r)[0].status.message(), "peer rank 2 lost: nothing heard for 2 s") << "node " << r;
  }
  // Back, and the next iteration goes through every node again.
  for (uint32_t r = 0; r < 4; ++r)
    if (r != 2) c.cut(r, 2, false);
  for (uint32_t r = 0; r < 4; ++r)
    if (r != 2) {
      c.engine(r).onPeerUp(2);
      c.engine(2).onPeerUp(r);
    }
  c.pump();
  for (uint32_t r = 0; r < 4; ++r) c.done(r).clear();
  std::vector<std::vector<float>> h(4, std::vector<float>(8000));
  for (uint32_t r = 0; r < 4; ++r) {
    for (uint64_t i = 0; i < 8000; ++i) h[r][i] = valueOf(r, 2, 5, i);
    ASSERT_TRUE(c.engine(r).reduce(job, 2, 5, {h[r].data()}).ok());
  }
  c.pump();
  for (uint32_t r = 0; r < 4; ++r) {
    ASSERT_EQ(c.done(r).size(), 1u) << "node " << r;
    EXPECT_TRUE(c.done(r)[0].status.ok()) << c.done(r)[0].status.toString();
    EXPECT_EQ(h[r], h[0]);
  }
}

TEST(EngineRing, APeerLostMidRingFailsTheReductionOnEveryNodeNamingIt) {
  aPeerLostMidReductionFailsItOnEveryNode(ringOptions(), 2);  // partial sums on their way round
}

TEST(EngineAllgather, APeerLostMidwayFailsTheReductionOnEveryNodeNamingIt) {
  aPeerLostMidReductionFailsItOnEveryNode(allgatherOptions(), 1);  // shares encoded, some sent
}

TEST(EngineAllgather, NoneIsTheExactSumInRankOrder) {
  expectExactSumsIn(Topology::kAllgather, [](uint32_t, uint32_t hop, uint32_t) { return hop; });
}

TEST(EngineAllgather, EveryNodeSendsItsShareToEveryOtherAndNoResultsTravel) {
  Cluster c(4, allgatherOptions());
  runAndCheck(c, 1, {4000, 17}, 2, 8.0, "topk");
  for (uint32_t from = 0; from < 4; ++from) {
    EXPECT_TRUE(c.results(from).empty()) << "node " << from;
    for (uint32_t to = 0; to < 4; ++to) {
      if (to == from) continue;
      EXPECT_EQ(c.sent(from, to), 2u * (4 + 1)) << from << " -> " << to << ": every slice, twice";
    }
  }
}

TEST(EngineAllgather, EveryCodecGivesEveryNodeTheSameBytes) { expectEveryCodecAgrees(Topology::kAllgather); }

TEST(EngineAllgather, TopkIsEachNodesEncodingDecodedAndSummedOnce) {
  // The first step (residuals empty): the result is the rank-order sum of every node's own
  // top-k, decoded, divided once; a parameter server would re-encode that sum with top-k
  // again and lose more of it.
  const uint32_t nodes = 4;
  const uint64_t n = 3000;
  const compress::CodecSpec topk{"topk", {{"ratio", "0.05"}}};
  auto codec = compress::makeCodec(topk).value();
  const uint64_t job = jobIdOf("topk");
  std::vector<std::vector<float>> got(nodes), ps(nodes);
  for (Topology t : {Topology::kAllgather, Topology::kPs}) {
    EngineOptions o = smallSlices();
    o.topology = t;
    o.min_elements = 0;
    Cluster c(nodes, o);
    auto& out = t == Topology::kAllgather ? got : ps;
    for (uint32_t r = 0; r < nodes; ++r) {
      ASSERT_TRUE(c.engine(r).declareJob(job, {{1, n, 0, topk, {}}}).ok());
      out[r].resize(n);
      for (uint64_t i = 0; i < n; ++i) out[r][i] = valueOf(r, 1, 1, i);
    }
    for (uint32_t r = 0; r < nodes; ++r) ASSERT_TRUE(c.engine(r).reduce(job, 1, 1, {out[r].data()}).ok());
    c.pump();
    for (uint32_t r = 0; r < nodes; ++r) {
      ASSERT_EQ(c.done(r).size(), 1u);
      ASSERT_TRUE(c.done(r)[0].status.ok()) << c.done(r)[0].status.toString();
      EXPECT_EQ(out[r], out[0]);
    }
  }
  double allgather_error = 0, ps_error = 0;
  for (uint32_t s = 0; s * kSlice < n; ++s) {
    const uint64_t begin = s * kSlice, len = std::min<uint64_t>(kSlice, n - begin);
    std::vector<float> sum(len, -0.0f);
    for (uint32_t r = 0; r < nodes; ++r) {
      std::vector<float> in(len), state(codec->stateElements(len), 0.0f);
      for (uint64_t i = 0; i < len; ++i) in[i] = valueOf(r, 1, 1, begin + i);
      std::vector<std::byte> bytes(codec->maxEncodedBytes(len));
      const size_t used = codec->encode(in, state, bytes, {1, s, 1}).value();
      ASSERT_TRUE(codec->decodeAdd(std::span(bytes).first(used), sum, {1, s, 1}).ok());
    }
    for (uint64_t i = 0; i < len; ++i) {
      const float expected = sum[i] * (1.0f / nodes);
      ASSERT_EQ(std::bit_cast<uint32_t>(got[0][begin + i]), std::bit_cast<uint32_t>(expected)) << begin + i;
      double exact = 0;
      for (uint32_t r = 0; r < nodes; ++r) exact += valueOf(r, 1, 1, begin + i);
      exact /= nodes;
      allgather_error += std::abs(got[0][begin + i] - exact);
      ps_error += std::abs(ps[0][begin + i] - exact);
    }
  }
  EXPECT_LT(allgather_error, ps_error) << "one compression error, not two";
}

// Node 1's shares are in at node 0 before node 0 starts: node 0 finishes at once, with its
// own shares still queued behind a window of one. `then` happens to node 0 before anything
// more is sent; node 1 must still finish, with node 0's bytes.
void nodeZeroFinishesFirst(const std::function<void(ReductionEngine&, uint64_t job)>& then) {
  EngineOptions o = allgatherOptions();
  o.inflight_per_peer = 1;
  Cluster c(2, o);
  const uint64_t job = jobIdOf("first");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{1, 6000, 0, {"none", {}}, {}}}).ok());
  std::vector<std::vector<float>> g(2, std::vector<float>(6000));
  for (uint32_t r = 0; r < 2; ++r)
    for (uint64_t i = 0; i < 6000; ++i) g[r][i] = valueOf(r, 1, 1, i);
  ASSERT_TRUE(c.engine(1).reduce(job, 1, 1, {g[1].data()}).ok());
  c.pump();
  ASSERT_TRUE(c.engine(0).reduce(job, 1, 1, {g[0].data()}).ok());
  for (int i = 0; i < 10; ++i) c.settleCoders();
  ASSERT_EQ(c.done(0).size(), 1u) << "node 0 finished before its shares left";
  ASSERT_GT(c.gauge(0, metrics::Id::send_queue, {"1"}), 0);
  then(c.engine(0), job);
  c.pump();
  ASSERT_EQ(c.done(1).size(), 1u);
  EXPECT_TRUE(c.done(1)[0].status.ok()) << c.done(1)[0].status.toString();
  EXPECT_EQ(g[0], g[1]);
  EXPECT_EQ(c.gauge(0, metrics::Id::send_queue, {"1"}), 0);
}

TEST(EngineAllgather, ANodeThatFinishedFirstStillSendsItsSharesAfterARedeclaration) {
  // A trainer declaring a new key re-declares the job.
  nodeZeroFinishesFirst([](ReductionEngine& e, uint64_t job) {
    ASSERT_TRUE(e.declareJob(job, {{1, 6000, 0, {"none", {}}, {}}, {2, 10, 0, {"none", {}}, {}}}).ok());
  });
}

TEST(EngineAllgather, ANodeWhoseTrainersLeftStillSendsTheSharesItOwes) {
  // Its trainers leave once they have their result: the job is dropped there.
  nodeZeroFinishesFirst([](ReductionEngine& e, uint64_t job) {
    e.dropJob(job);
    e.tick();  // the shares it owes are still queued: they are kept
  });
}

TEST(EngineAutoTopology, EachTensorGoesWhereTheModelSaysAndSumsCorrectly) {
  // scheduler.topology = auto on 4 nodes (and 40000-element slices): a tensor without a codec
  // goes round the ring, a large 2bit one to the owners, a small dgc one to everyone; an
  // mxnet tensor stays with the owners. Every node agrees, and none sums exactly.
  EngineOptions o;
  o.topology = Topology::kAuto;
  Cluster c(4, o);
  const uint64_t job = jobIdOf("auto");
  ReductionPolicy mxnet;
  mxnet.aggregation = Aggregation::kMxnet;
  const std::vector<TensorSpec> specs = {{1, 2'000'000, 0, {"none", {}}, {}},
                                         {2, 2'000'000, -1, {"2bit", {}}, {}},
                                         {3, 4096, -2, {"dgc", {{"ratio", "0.001"}}}, {}},
                                         {4, 300'000, -3, {"2bit", {}}, mxnet}};
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, specs).ok());
  const std::vector<Topology> want = {Topology::kRing, Topology::kPs, Topology::kAllgather, Topology::kPs};
  // Every node makes the same choices (the topology is part of the wire); which tensor went
  // where the sums below show (a ring's, an owner's and an allgather's orders differ).
  for (uint32_t r = 0; r < 4; ++r)
    for (Topology t : {Topology::kPs, Topology::kRing, Topology::kAllgather})
      EXPECT_EQ(c.gauge(r, metrics::Id::planned_topology, {std::string(topologyName(t))}),
                std::count(want.begin(), want.end(), t))
          << "node " << r << " " << topologyName(t);
  std::vector<std::vector<std::vector<float>>> g(4);
  for (uint32_t r = 0; r < 4; ++r)
    for (const TensorSpec& t : specs) {
      g[r].emplace_back(t.elements);
      for (uint64_t i = 0; i < t.elements; ++i) g[r].back()[i] = valueOf(r, 1, t.key, i) / 16;
    }
  for (uint32_t r = 0; r < 4; ++r)
    for (size_t i = 0; i < specs.size(); ++i) ASSERT_TRUE(c.engine(r).reduce(job, 1, specs[i].key, {g[r][i].data()}).ok());
  c.pump(2000);
  for (uint32_t r = 0; r < 4; ++r) {
    ASSERT_EQ(c.done(r).size(), specs.size()) << "node " << r;
    for (const Done& d : c.done(r)) EXPECT_TRUE(d.status.ok()) << d.status.toString();
    for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(g[r][i], g[0][i]) << "node " << r << " tensor " << i;
  }
  for (uint64_t i = 0; i < specs[0].elements; i += 997) {
    double exact = 0;
    for (uint32_t r = 0; r < 4; ++r) exact += valueOf(r, 1, 1, i) / 16;
    ASSERT_NEAR(g[0][0][i], exact / 4, 1e-7) << i;
  }
}

TEST(EngineAutoTopology, OnFastLinksAJobWithoutACodecStaysWithTheOwners) {
  // scheduler.link_gbps = 10 on 4 nodes: the node's CPU, not the link, would bound ps, so the
  // ring's one flow per link gains nothing; a tensor without a codec goes to its owners, and
  // still sums exactly.
  EngineOptions o;
  o.topology = Topology::kAuto;
  o.link_gbps = 10;
  Cluster c(4, o);
  const uint64_t job = jobIdOf("fast");
  const std::vector<TensorSpec> specs = {{1, 200'000, 0, {"none", {}}, {}}};
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, specs).ok());
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(c.gauge(r, metrics::Id::planned_topology, {"ps"}), 1) << "node " << r;
  std::vector<std::vector<float>> g(4, std::vector<float>(specs[0].elements));
  for (uint32_t r = 0; r < 4; ++r)
    for (uint64_t i = 0; i < specs[0].elements; ++i) g[r][i] = valueOf(r, 1, 1, i) / 16;
  for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(c.engine(r).reduce(job, 1, 1, {g[r].data()}).ok());
  c.pump(2000);
  for (uint32_t r = 0; r < 4; ++r) {
    ASSERT_EQ(c.done(r).size(), 1u) << "node " << r;
    EXPECT_TRUE(c.done(r)[0].status.ok()) << c.done(r)[0].status.toString();
  }
  for (uint64_t i = 0; i < specs[0].elements; i += 97) {
    double exact = 0;
    for (uint32_t r = 0; r < 4; ++r) exact += valueOf(r, 1, 1, i) / 16;
    ASSERT_NEAR(g[1][i], exact / 4, 1e-7) << i;
  }
}

TEST(EngineAllgather, ResultsAreRefused) {
  Cluster c(2, allgatherOptions());
  const uint64_t job = jobIdOf("forged");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{5, 4000, 0, {"none", {}}, {}}}).ok());
  SliceMessage h{SliceKind::kResult, job, 5, 1, 0, 4, 4000, 0, 1, 0, Topology::kAllgather};
  std::vector<float> payload(1000, 1.0f);
  c.engine(1).onMessage({0, encodePeerFrame(h), std::as_bytes(std::span(payload))});
  EXPECT_EQ(c.engine(1).counters().bad_messages, 1u);
  const auto last = c.engine(1).stats().health().snapshot().last_error;
  ASSERT_TRUE(last.has_value());
  EXPECT_NE(last->message.find("under allgather every node sums the contributions itself"), std::string::npos)
      << last->message;
}

}  // namespace
}  // namespace gcagent::agent
