#include "scheduler/planner.h"

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::scheduler {
namespace {

constexpr double kDecay = 0.995;

double seconds(Planner::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Result<Selection> parseSelection(std::string_view name) {
  if (name == "size") return Selection::kSize;
  if (name == "auto") return Selection::kAuto;
  return Status::invalidArgument(strCat("unknown selection '", name, "' (size or auto)"));
}

StepCosts referenceCosts(double link_gbps) {
  StepCosts c;
  c.encode = {1.1e-9, 2e-6, 5e-6};    // ~3.7 GB/s of fp32 in
  c.decode = {1.1e-8, 2e-6, 5e-6};    // per encoded element: ~5.8 GB/s of fp32 out at 1/16
  c.gather = {3.2e-8 / link_gbps, 5e-5, 5e-5};  // 4 bytes at 1 Gbit/s, ~50 us per message
  c.broadcast = c.gather;
  c.aggregate = {8e-10, 0, 0};        // an fp32 add, ~5 GB/s
  c.ratio = 1.0 / 16;
  return c;
}

Planner::Planner(PlannerOptions options) : options_(options) {
  const StepCosts ref = referenceCosts(options_.link_gbps);
  wire_cost_ = ref.gather;
  aggregate_cost_ = ref.aggregate;
}

uint32_t Planner::partitions(uint64_t elements) const {
  if (options_.selection != Selection::kAuto) return 1;
  return planReduction(referenceCosts(options_.link_gbps), static_cast<double>(elements), options_.nodes).partitions;
}

Planner::CodecModel& Planner::model(std::string_view codec) {
  auto it = codecs_.find(codec);
  if (it == codecs_.end()) {
    const StepCosts ref = referenceCosts(options_.link_gbps);
    CodecModel m{CostFit(4096, kDecay), CostFit(256, kDecay), 0, 0, ref.encode, ref.decode, false};
    it = codecs_.emplace(std::string(codec), std::move(m)).first;
  }
  return it->second;
}

StepCosts Planner::costs(std::string_view codec) const {
  StepCosts c = referenceCosts(options_.link_gbps);
  c.gather = c.broadcast = wire_cost_;
  c.aggregate = aggregate_cost_;
  auto it = codecs_.find(codec);
  if (it != codecs_.end()) {
    c.encode = it->second.encode_cost;
    c.decode = it->second.decode_cost;
    if (it->second.raw_bytes > 0) c.ratio = it->second.wire_bytes / it->second.raw_bytes;
  }
  return c;
}

Plan Planner::decide(uint64_t elements, const compress::Codec& codec) {
  Plan plan;
  plan.partitions = partitions(elements);
  if (codec.name() == "none") return plan;
  if (options_.selection == Selection::kSize) {
    plan.compress = elements >= options_.min_elements;
    return plan;
  }
  CodecModel& m = model(codec.name());
  if (!m.calibrated) calibrate(codec, m);
  plan = planReduction(costs(codec.name()), static_cast<double>(elements), options_.nodes);
  plan.partitions = partitions(elements);
  return plan;
}

std::pair<Topology, TopologyCosts> Planner::chooseTopology(uint64_t elements, const compress::Codec& codec) const {
  const double x = static_cast<double>(elements);
  const StepCosts ref = referenceCosts(options_.link_gbps);
  bool compressed = codec.name() != "none";
  if (compressed)
    compressed = options_.selection == Selection::kSize ? elements >= options_.min_elements
                                                        : planReduction(ref, x, options_.nodes).compress;
  const uint64_t slice = std::max<uint64_t>(1, std::min<uint64_t>(elements, options_.slice_elements));
  const double ratio = static_cast<double>(codec.steadyEncodedBytes(slice)) / (4.0 * static_cast<double>(slice));
  const TopologyCosts costs = topologyCosts(ref, x, static_cast<double>(options_.slice_elements),
                                            options_.nodes, compressed, ratio);
  // A tensor with no codec never compresses, and neither does any other tensor of a job that
  // chose none: all of them travel one way (topology_model.h).
  if (codec.name() == "none")
    return {uncompressedJobTopology(ref, static_cast<double>(options_.slice_elements), options_.nodes), costs};
  return {scheduler::chooseTopology(costs, compressed), costs};
}

void Planner::calibrate(const compress::Codec& codec, CodecModel& m) {
  // A few encodes and decodes of synthetic gradients, so the first plans rest on this
  // machine's speed; real traffic refines the fit from then on.
  m.calibrated = true;
  const uint64_t largest = std::max<uint64_t>(options_.slice_elements, 8192);
  std::vector<float> input(largest), acc(largest);
  for (uint64_t i = 0; i < largest; ++i) input[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  std::vector<std::byte> out(codec.maxEncodedBytes(largest));
  for (uint64_t n : {uint64_t{512}, largest / 8, largest / 2, largest}) {
    std::vector<float> state(codec.stateElements(n), 0.0f);
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      auto written = codec.encode({input.data(), n}, state, out, {0, 0, static_cast<uint64_t>(rep)});
      const auto t1 = Clock::now();
      if (!written.ok()) return;
      recordEncode(codec.name(), n, *written, seconds(t1 - t0));
      const auto t2 = Clock::now();
      Status s = codec.decodeAdd({out.data(), *written}, {acc.data(), n}, {0, 0, static_cast<uint64_t>(rep)});
      const auto t3 = Clock::now();
      if (!s.ok()) return;
      recordDecode(codec.name(), *written, seconds(t3 - t2));
    }
  }
  if (auto fit = m.encode.fit()) m.encode_cost = *fit;
  if (auto fit = m.decode.fit()) m.decode_cost = *fit;
}

void Planner::recordEncode(std::string_view codec, uint64_t elements, uint64_t encoded_bytes, double secs) {
  CodecModel& m = model(codec);
  m.encode.add(static_cast<double>(elements), secs);
  m.raw_bytes = m.raw_bytes * kDecay + 4.0 * static_cast<double>(elements);
  m.wire_bytes = m.wire_bytes * kDecay + static_cast<double>(encoded_bytes);
}

void Planner::recordDecode(std::string_view codec, uint64_t encoded_bytes, double secs) {
  model(codec).decode.add(static_cast<double>(encoded_bytes) / 4, secs);
}

void Planner::recordWire(uint64_t bytes, double secs) { wire_.add(static_cast<double>(bytes) / 4, secs); }

bool Planner::maybeRefit(Clock::time_point now) {
  if (options_.selection != Selection::kAuto) return false;
  if (last_refit_ && now - *last_refit_ < std::chrono::duration<double>(options_.refit_interval)) return false;
  last_refit_ = now;
  for (auto& [name, m] : codecs_) {
    if (auto fit = m.encode.fit()) m.encode_cost = *fit;
    if (auto fit = m.decode.fit()) m.decode_cost = *fit;
  }
  if (auto fit = wire_.fit()) wire_cost_ = *fit;
  // The uncompressed codec's decode-add is the fp32 aggregation.
  auto none = codecs_.find("none");
  if (none != codecs_.end()) {
    if (auto fit = none->second.decode.fit()) aggregate_cost_ = *fit;
  }
  ++epoch_;
  return true;
}

}  // namespace gcagent::scheduler
