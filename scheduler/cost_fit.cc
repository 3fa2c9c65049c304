#include "scheduler/cost_fit.h"

#include <algorithm>

namespace gcagent::scheduler {

void CostFit::add(double x, double seconds) {
  if (x < linear_from_) {
    small_n_ = small_n_ * decay_ + 1;
    small_sy_ = small_sy_ * decay_ + seconds;
    return;
  }
  n_ = n_ * decay_ + 1;
  sx_ = sx_ * decay_ + x;
  sy_ = sy_ * decay_ + seconds;
  sxx_ = sxx_ * decay_ + x * x;
  sxy_ = sxy_ * decay_ + x * seconds;
  min_x_ = min_x_ == 0 ? x : std::min(min_x_, x);
  max_x_ = std::max(max_x_, x);
}

std::optional<LinearCost> CostFit::fit() const {
  if (n_ < 2 || max_x_ < 2 * min_x_) return std::nullopt;
  LinearCost c;
  const double det = n_ * sxx_ - sx_ * sx_;
  c.w = det > 0 ? (n_ * sxy_ - sx_ * sy_) / det : 0;
  c.b = (sy_ - c.w * sx_) / n_;
  if (c.w <= 0) {
    c.w = sy_ / sx_;
    c.b = 0;
  }
  c.b = std::max(c.b, 0.0);
  c.overhead = small_n_ > 0 ? small_sy_ / small_n_ : c.b;
  return c;
}

}  // namespace gcagent::scheduler
