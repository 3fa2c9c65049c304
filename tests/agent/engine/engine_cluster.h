// N reduction engines over loopback in one thread, for the engine's tests: each node with
// its own local trainers' buffers, links that a test can cut and restore.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "agent/engine/reduction_engine.h"
#include "agent/wire/peer_frame.h"
#include "tests/agent/coding/host_coders.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {

// A transport whose links to chosen peers are cut: peerUp() says so, sends to them fail and
// their messages are dropped, as a link that went down drops what was in flight.
class CuttableTransport : public transport::Transport {
 public:
  explicit CuttableTransport(std::unique_ptr<transport::Transport> inner)
      : inner_(std::move(inner)), cut_(inner_->size(), false), sent_(inner_->size(), 0) {}
  void cut(transport::Rank peer, bool cut) { cut_[peer] = cut; }
  // Messages handed over for each peer.
  uint64_t sent(transport::Rank peer) const { return sent_[peer]; }

  transport::Rank rank() const override { return inner_->rank(); }
  transport::Rank size() const override { return inner_->size(); }
  void setHandlers(MessageHandler on_message, PeerHandler on_peer) override {
    inner_->setHandlers([this, on_message](const transport::Message& m) {
      if (!cut_[m.from]) on_message(m);
    }, std::move(on_peer));
  }
  Status connect(const std::vector<std::string>& peers) override { return inner_->connect(peers); }
  Status send(transport::Rank to, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendDone done) override {
    if (cut_[to]) return Status::unavailable("cut");
    ++sent_[to];
    return inner_->send(to, header, payload, std::move(done));
  }
  bool progress() override { return inner_->progress(); }
  int eventFd() override { return inner_->eventFd(); }
  bool arm() override { return inner_->arm(); }
  bool peerUp(transport::Rank peer) const override { return !cut_[peer] && inner_->peerUp(peer); }
  std::string listenAddress() const override { return inner_->listenAddress(); }

 private:
  std::unique_ptr<transport::Transport> inner_;
  std::vector<bool> cut_;
  std::vector<uint64_t> sent_;
};

struct Done {
  uint64_t iteration;
  uint64_t key;
  Status status;
  std::optional<uint32_t> reload_root;  // the node whose weights the trainers load after it
};

// N engines over loopback. Every node's side runs on its host coder; nodes marked `coded`
// are handed a coder of their own with each reduction, one that stages its encodings and
// results as a GPU's does (StagedDevice), as a GPU node's gradients are. With
// `staged_owners`, every node's owner side works on such a coder too, as a GPU owner's.
class Cluster {
 public:
  Cluster(uint32_t nodes, EngineOptions options, std::vector<bool> coded = {}, bool staged_owners = false)
      : done_(nodes), contributions_(nodes), results_(nodes), frozen_(nodes, false) {
    for (auto& t : transport::makeLoopbackGroup(nodes)) transports_.push_back(std::make_unique<CuttableTransport>(std::move(t)));
    for (uint32_t r = 0; r < nodes; ++r) {
      const bool with_coder = r < coded.size() && coded[r];
      coders_.push_back(with_coder ? host_.makeStaged() : nullptr);
      EngineOptions o = options;
      o.host_stream = host_.stream();
      if (!o.planner) o.planner = std::make_shared<scheduler::Planner>(plannerOptionsOf(o, nodes));
      if (staged_owners) o.owner_coder = host_.makeStaged();
      planners_.push_back(o.planner);
      engines_.push_back(std::make_unique<ReductionEngine>(
          *transports_[r], o,
          [this, r](uint64_t, uint64_t it, uint64_t key, const Status& s, std::optional<uint32_t> reload_root) {
            done_[r].push_back({it, key, s, reload_root});
          }));
      ReductionEngine* e = engines_.back().get();
      transports_[r]->setHandlers(
          [this, e, r, nodes](const transport::Message& m) {
            if (auto f = parsePeerFrame(m.header, nodes); f.ok())
              if (const auto* h = std::get_if<SliceMessage>(&*f))
                (h->kind == SliceKind::kContribution ? contributions_ : results_)[r].push_back(h->key);
            e->onMessage(m);
          },
          nullptr);
      EXPECT_TRUE(transports_[r]->connect({}).ok());
    }
  }

  void pump(int rounds = 200) {
    for (int i = 0; i < rounds; ++i) {
      bool worked = false;
      for (size_t r = 0; r < transports_.size(); ++r)
        if (!frozen_[r]) worked |= transports_[r]->progress();
      worked |= host_.poll();  // the coders' reports
      if (!worked && i > 2) return;
    }
  }

  // Delivers what has reached node r, and nothing else: the coders' work it queues waits.
  void deliver(uint32_t r) {
    while (transports_[r]->progress()) {
    }
  }

  // A frozen node's transport is not run (a stopped process): what is sent to it waits.
  void freeze(uint32_t r, bool frozen) { frozen_[r] = frozen; }

  // Runs the coders' work and reports, but delivers nothing over the transports.
  void settleCoders() { host_.poll(); }

  ReductionEngine& engine(uint32_t r) { return *engines_[r]; }
  scheduler::Planner& planner(uint32_t r) { return *planners_[r]; }
  // A gauge of node r's engine, its read-time gauges refreshed first.
  double gauge(uint32_t r, metrics::Id id, const std::vector<std::string>& labels = {}) {
    engines_[r]->tick();
    return engines_[r]->stats().gauge(id, labels).Value();
  }
  // Cuts (or restores) the link between nodes a and b, both ways.
  void cut(uint32_t a, uint32_t b, bool cut) {
    transports_[a]->cut(b, cut);
    transports_[b]->cut(a, cut);
  }
  std::shared_ptr<LocalCoder> coder(uint32_t r) { return coders_[r]; }
  // Messages node `from` handed over for node `to`.
  uint64_t sent(uint32_t from, uint32_t to) const { return transports_[from]->sent(to); }
  std::vector<Done>& done(uint32_t r) { return done_[r]; }
  // The keys of the contributions node r received, in the order they arrived.
  const std::vector<uint64_t>& contributions(uint32_t r) const { return contributions_[r]; }
  const std::vector<uint64_t>& results(uint32_t r) const { return results_[r]; }
  uint32_t size() const { return static_cast<uint32_t>(engines_.size()); }

 private:
  asio::io_context io_;
  HostCoders host_{io_};
  std::vector<std::shared_ptr<LocalCoder>> coders_;  // before the engines: they outlive them
  std::vector<std::unique_ptr<CuttableTransport>> transports_;
  std::vector<std::shared_ptr<scheduler::Planner>> planners_;
  std::vector<std::unique_ptr<ReductionEngine>> engines_;
  std::vector<std::vector<Done>> done_;
  std::vector<std::vector<uint64_t>> contributions_, results_;
  std::vector<bool> frozen_;
};

}  // namespace gcagent::agent
