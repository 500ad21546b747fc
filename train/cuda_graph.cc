#include "train/cuda_graph.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <optional>
#include <stdexcept>
#include <type_traits>

#if CART_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "common/strings.h"
#include "train/torch_error.h"

namespace cart::train {

#if CART_TORCH_CUDA

namespace {

// LibTorch's graph, and what a capture that failed half-way leaves held. The graph records into a
// private memory pool of the caching allocator. When the capture fails before it ended (an illegal
// call during recording ends it at cudaStreamEndCapture), LibTorch releases that pool itself only
// from the release that tracks it (the `allocated_pool_` member, present in 2.15's header, absent
// from 2.11's); before that, reset() releases only a capture that ended, and the pool, up to a
// step's activations, stays held for the rest of the process, which the fallback to unrecorded
// steps then runs short of.
class RecordingGraph : public at::cuda::CUDAGraph {
 public:
  // Whether this LibTorch's graph releases the pool of a failed capture itself. Detected from its
  // header (the member is protected: the check is made from here, where it is accessible).
  static constexpr bool LibTorchReleasesAbandonedPools();

  template <typename Graph = RecordingGraph>
  void ReleaseAbandonedPool() {
    if constexpr (decltype(TracksPool<Graph>(nullptr, 0))::value) {
      return;  // LibTorch does it
    } else {
      Graph& g = static_cast<Graph&>(*this);
      if (g.capture_ended_ || g.capture_dev_ == Graph::UNDEFINED_DEVICE) return;
      // Either may already be done (the capture got as far as ending its pool); each throws then.
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(g.capture_dev_, g.mempool_id_);
      } catch (const std::exception&) {
      }
      try {
        c10::cuda::CUDACachingAllocator::releasePool(g.capture_dev_, g.mempool_id_);
      } catch (const std::exception&) {
      }
    }
  }

 private:
  template <typename Graph>
  static auto TracksPool(Graph* g, int) -> decltype((void)g->allocated_pool_, std::true_type{});
  template <typename Graph>
  static std::false_type TracksPool(Graph*, long);
};

constexpr bool RecordingGraph::LibTorchReleasesAbandonedPools() {
  return decltype(TracksPool<RecordingGraph>(nullptr, 0))::value;
}

}  // namespace

struct CudaGraph::Impl {
  explicit Impl(c10::Device device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        on_stream(stream) {}
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard on_stream;
  std::optional<RecordingGraph> graph;
  bool captured = false;
};

absl::Status CudaGraph::Check(c10::Device device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        StrCat("a CUDA graph records a step on a CUDA device; this run trains on ", device.str()));
  }
  return absl::OkStatus();
}

CudaGraph::CudaGraph(c10::Device device) : impl_(std::make_unique<Impl>(device)) {}
CudaGraph::~CudaGraph() = default;

absl::Status CudaGraph::Capture(const std::function<void()>& step) {
  if (impl_->captured) return absl::FailedPreconditionError("the step is recorded already");
  // Whatever ran before (the eager steps) is finished before recording starts, and the blocks
  // the allocator cached for them go back to the device: the graph records into a pool of its
  // own, and the cached ones would otherwise hold a second step's worth of memory.
  impl_->stream.synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  impl_->graph.emplace();
  absl::Status status;
  bool began = false;
  try {
    impl_->graph->capture_begin();
    began = true;
    try {
      step();
    } catch (...) {
      try {
        impl_->graph->capture_end();  // ends the stream's capture; the graph is dropped below
      } catch (const std::exception&) {
      }
      throw;
    }
    impl_->graph->capture_end();
    impl_->captured = true;
  } catch (const std::exception& e) {
    status = FromTorchError(e, "recording the step as a CUDA graph failed: ");
    if (began) impl_->graph->ReleaseAbandonedPool();
    impl_->graph.reset();
    c10::cuda::CUDACachingAllocator::emptyCache();  // the released pool's blocks, back to the
                                                    // device
  }
  at::autocast::set_autocast_cache_enabled(cache);
  return status;
}

bool CudaGraph::captured() const { return impl_->captured; }

bool CudaGraph::LibTorchReleasesAbandonedPools() {
  return RecordingGraph::LibTorchReleasesAbandonedPools();
}

void CudaGraph::Replay() {
  if (!impl_->captured) throw std::logic_error("CudaGraph::Replay before a capture");
  impl_->graph->replay();
}

#else  // a CPU LibTorch: nothing to record with

struct CudaGraph::Impl {};

absl::Status CudaGraph::Check(c10::Device device) {
  return absl::FailedPreconditionError(
      StrCat("a CUDA graph needs a CUDA LibTorch 2.x; this build's LibTorch ", TORCH_VERSION_MAJOR,
             ".", TORCH_VERSION_MINOR, " has no CUDA (", device.str(), ")"));
}
CudaGraph::CudaGraph(c10::Device) : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;
absl::Status CudaGraph::Capture(const std::function<void()>&) {
  return absl::FailedPreconditionError("no CUDA in this build");
}
bool CudaGraph::captured() const { return false; }
bool CudaGraph::LibTorchReleasesAbandonedPools() { return false; }
void CudaGraph::Replay() { throw std::logic_error("CudaGraph::Replay without CUDA"); }

#endif

}  // namespace cart::train
