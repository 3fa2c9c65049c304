// Fits one step's LinearCost from timings taken while the agent runs. Samples at or above
// `linear_from` elements go into a least-squares line w*x + b; smaller ones into the
// overhead (their mean). Older samples fade (each new one multiplies the weight of the
// rest by `decay`), so the model follows a link or a machine that changes speed.
#pragma once

#include <cstdint>
#include <optional>

#include "scheduler/cost_model.h"

namespace gcagent::scheduler {

class CostFit {
 public:
  explicit CostFit(double linear_from = 4096, double decay = 0.995) : linear_from_(linear_from), decay_(decay) {}

  void add(double x, double seconds);

  // Needs samples at two sizes at least a factor 2 apart; a negative slope (noise) is
  // clamped to the mean cost per element. Without small samples the overhead is b.
  std::optional<LinearCost> fit() const;
  double weight() const { return n_ + small_n_; }

 private:
  double linear_from_, decay_;
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double min_x_ = 0, max_x_ = 0;
  double small_n_ = 0, small_sy_ = 0;
};

}  // namespace gcagent::scheduler
