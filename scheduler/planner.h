// Selective compression: which gradients are worth compressing, and into how many
// partitions to cut them.
//
//   size: compress a tensor when it has at least `min_elements` elements (BytePS's and
//         HiPress's static threshold);
//   auto: the SeCoPa cost model (cost_model.h) with coefficients fitted from this agent's
//         own measurements: encode and decode timings of every codec in use (seeded by a
//         short calibration the first time a codec is planned), the link's cost per byte
//         from completed sends, and the fp32 add. Re-fitted every `refit_interval`.
//
// Compress-or-not may differ between nodes and change at any time: every slice names its
// codec on the wire, and a slice sent uncompressed carries its residual along. The partition
// count changes the slice geometry that every node must share, so it comes from the fixed
// reference model (the same on every node given the same scheduler.link_gbps), not from the
// fitted one.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "compress/codec.h"
#include "scheduler/cost_fit.h"
#include "scheduler/cost_model.h"
#include "scheduler/topology_model.h"

namespace gcagent::scheduler {

enum class Selection { kSize, kAuto };
Result<Selection> parseSelection(std::string_view name);

struct PlannerOptions {
  Selection selection = Selection::kSize;
  uint64_t min_elements = 0;
  uint32_t nodes = 1;
  uint64_t slice_elements = 40000;
  double refit_interval = 5.0;  // seconds
  // The links' speed the reference model prices (scheduler.link_gbps): every node must be
  // told the same, as partition counts and auto's topologies are on the wire.
  double link_gbps = 1.0;
};

// The coefficients the auto planner starts from and derives slice geometry from, in
// seconds per fp32 element: 2-bit encode and decode on one core of a 2-core Cascade Lake
// (bench/codec_bench.cc) and a link of `link_gbps` Gbit/s (~50 us per message whatever its
// speed).
StepCosts referenceCosts(double link_gbps = 1.0);

class Planner {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Planner(PlannerOptions options);

  Selection selection() const { return options_.selection; }
  // Partition count for the slice geometry of a tensor: 1 in size mode.
  uint32_t partitions(uint64_t elements) const;
  // Whether a tensor of `elements` should travel compressed with `codec` now.
  Plan decide(uint64_t elements, const compress::Codec& codec);
  // scheduler.topology = auto: a tensor's topology, and the model's costs, from the reference
  // model and whether that model (or min_elements) compresses it: the same on every node,
  // as the topology is part of the wire. A tensor whose codec is none travels as its whole
  // job does, whatever its size (uncompressedJobTopology).
  std::pair<Topology, TopologyCosts> chooseTopology(uint64_t elements, const compress::Codec& codec) const;

  // Measurements. x of encode and aggregate is fp32 elements; decode's is the encoded size
  // in fp32-element units (bytes / 4), as in SeCoPa's table.
  void recordEncode(std::string_view codec, uint64_t elements, uint64_t encoded_bytes, double seconds);
  void recordDecode(std::string_view codec, uint64_t encoded_bytes, double seconds);
  void recordWire(uint64_t bytes, double seconds);

  // Re-fits when it never has, or when refit_interval has passed since it last did; returns
  // true (and bumps epoch()) when it did.
  bool maybeRefit(Clock::time_point now);
  uint64_t epoch() const { return epoch_; }
  // The model auto mode currently plans `codec` with.
  StepCosts costs(std::string_view codec) const;

 private:
  struct CodecModel {
    CostFit encode, decode;
    double raw_bytes = 0, wire_bytes = 0;  // fading sums, for the ratio
    LinearCost encode_cost, decode_cost;
    bool calibrated = false;
  };
  CodecModel& model(std::string_view codec);
  void calibrate(const compress::Codec& codec, CodecModel& m);

  PlannerOptions options_;
  std::map<std::string, CodecModel, std::less<>> codecs_;
  CostFit wire_{1024};
  LinearCost wire_cost_, aggregate_cost_;
  std::optional<Clock::time_point> last_refit_;  // none: never re-fitted
  uint64_t epoch_ = 0;
};

}  // namespace gcagent::scheduler
