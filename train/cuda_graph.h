#pragma once

// A training step recorded once as a CUDA graph and replayed at every later step (docs/gpu.md
// "CUDA graphs"): one launch instead of the step's ~2,500 kernel launches, which on a large card
// leave the GPU waiting for the host. Off by default (TrainOptions::cuda_graph, cart-worker and
// `cart model bench --cuda-graph`) until a GPU has measured it.
//
// What may be recorded: work on the device only, from tensors that outlive the graph, into
// tensors that outlive it (the trainer's capturable step: inputs copied into fixed tensors, the
// learning rate and AdamW's step count on the device, no read to the host). Recording runs
// nothing: the step recorded is then replayed to run.

#include <c10/core/Device.h>

#include <functional>
#include <memory>

#include "absl/status/status.h"

namespace cart::train {

class CudaGraph {
 public:
  // OK when this build can record a step on `device`: a CUDA LibTorch 2.x and a CUDA device.
  // Otherwise FailedPrecondition naming what is missing.
  static absl::Status Check(c10::Device device);

  // A side stream of `device` is made current while the graph lives: recording needs a stream
  // other than the default one, and the steps before it run there too, so that what they set up
  // lazily (cuBLAS's workspace for the stream, the allocator's blocks) exists when it is
  // recorded. Call only after Check succeeded.
  explicit CudaGraph(c10::Device device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records `step` (run once, under capture: nothing executes). Autocast's weight cache is off
  // while it records (a cached cast would be recorded as made once and read stale after the
  // optimizer step). Internal naming LibTorch's or CUDA's error when the step does what a graph
  // cannot hold (a read to the host, a synchronisation); the graph is then empty and the step
  // can run without it.
  absl::Status Capture(const std::function<void()>& step);
  bool captured() const;
  // Runs the recorded step on the graph's stream. Requires captured().
  void Replay();

  // Whether this build's LibTorch releases the memory pool of a recording that failed half-way
  // by itself (2.15 does, 2.11 does not: Capture then releases it). False without CUDA.
  static bool LibTorchReleasesAbandonedPools();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cart::train
