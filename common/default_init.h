// Containers that leave new elements uninitialised. Slice buffers are overwritten right after
// they are sized; value-initialising them first doubled the memory traffic of the
// uncompressed path (a memset per slice on every hop).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace gcagent {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-, not value-initialised
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    std::construct_at(p, std::forward<Args>(args)...);
  }
};

// resize() of these leaves the new elements with whatever the memory held. Build them sized,
// then memcpy: constructed or assigned from a pointer range they copy element by element, as
// the allocator's construct() keeps libstdc++ from using memmove (20 times slower).
using ByteBuffer = std::vector<std::byte, DefaultInitAllocator<std::byte>>;
using FloatBuffer = std::vector<float, DefaultInitAllocator<float>>;

}  // namespace gcagent
