#pragma once

// Running out of memory on demand, for tests: a CPU allocator installed over LibTorch's own
// (c10::SetCPUAllocator) that passes every request to the default allocator until a
// ScopedOutOfMemory is alive, and then fails each one the way LibTorch's CPU allocator fails when
// malloc returns null. Code under test sees a real LibTorch out-of-memory error, thrown from
// inside the op that allocates.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <atomic>
#include <cstddef>

namespace cart::testing {

class OutOfMemoryAllocator final : public c10::Allocator {
 public:
  // The installed allocator (installed on first use; it stays for the life of the process).
  static OutOfMemoryAllocator& Get() {
    static OutOfMemoryAllocator* installed = [] {
      auto* a = new OutOfMemoryAllocator(c10::GetDefaultCPUAllocator());
      c10::SetCPUAllocator(a, /*priority=*/1);  // above the default's 0
      return a;
    }();
    return *installed;
  }

  void set_failing(bool failing) { failing_.store(failing); }
  int64_t refused() const { return refused_.load(); }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }

 private:
  explicit OutOfMemoryAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr Allocate(size_t n) const {
    if (failing_.load()) {
      refused_.fetch_add(1);
      // What LibTorch's DefaultCPUAllocator throws when malloc fails: a c10::OutOfMemoryError
      // from 2.x on, before that a plain c10::Error whose text is the only sign.
#if TORCH_VERSION_MAJOR >= 2
      TORCH_CHECK_WITH(OutOfMemoryError, false,
                       "DefaultCPUAllocator: not enough memory: you tried to allocate ", n,
                       " bytes.");
#else
      TORCH_CHECK(false, "DefaultCPUAllocator: not enough memory: you tried to allocate ", n,
                  " bytes.");
#endif
    }
    return inner_->allocate(n);
  }

  c10::Allocator* inner_;
  std::atomic<bool> failing_{false};
  mutable std::atomic<int64_t> refused_{0};
};

// While alive, every CPU tensor allocation in the process fails.
class ScopedOutOfMemory {
 public:
  ScopedOutOfMemory() { OutOfMemoryAllocator::Get().set_failing(true); }
  ~ScopedOutOfMemory() { OutOfMemoryAllocator::Get().set_failing(false); }
  ScopedOutOfMemory(const ScopedOutOfMemory&) = delete;
  ScopedOutOfMemory& operator=(const ScopedOutOfMemory&) = delete;
};

}  // namespace cart::testing
