#include "compress/without_feedback.h"

#include <algorithm>
#include <vector>

namespace gcagent::compress {
namespace {

class WithoutFeedbackCodec final : public Codec {
 public:
  explicit WithoutFeedbackCodec(std::unique_ptr<Codec> inner) : inner_(std::move(inner)) {}

  std::string_view name() const override { return inner_->name(); }
  size_t stateElements(size_t) const override { return 0; }
  std::span<const float> residual(std::span<const float>, size_t) const override { return {}; }
  size_t maxEncodedBytes(size_t n) const override { return inner_->maxEncodedBytes(n); }
  size_t steadyEncodedBytes(size_t n) const override { return inner_->steadyEncodedBytes(n); }
  bool isFixedSize() const override { return inner_->isFixedSize(); }

  Result<size_t> encode(std::span<const float> in, std::span<float>, std::span<std::byte> out,
                        const SliceId& id) const override {
    // Per thread: encode is const and runs on several codec threads at once. The buffer
    // keeps the size of the largest slice this thread has seen.
    thread_local std::vector<float> scratch;
    const size_t need = inner_->stateElements(in.size());
    if (scratch.size() < need) scratch.resize(need);
    const std::span<float> state(scratch.data(), need);
    std::fill(state.begin(), state.end(), 0.0f);
    return inner_->encode(in, state, out, id);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId& id) const override {
    return inner_->decodeAdd(in, acc, id);
  }
  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId& id) const override {
    return inner_->decode(in, out, scale, id);
  }

 private:
  std::unique_ptr<Codec> inner_;
};

}  // namespace

std::unique_ptr<Codec> withoutErrorFeedback(std::unique_ptr<Codec> inner) {
  return std::make_unique<WithoutFeedbackCodec>(std::move(inner));
}

std::unique_ptr<Codec> applyErrorFeedback(bool error_feedback, std::unique_ptr<Codec> codec) {
  return error_feedback ? std::move(codec) : withoutErrorFeedback(std::move(codec));
}

}  // namespace gcagent::compress
