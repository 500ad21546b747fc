#pragma once

// Artifacts (checkpoints) over gRPC, both directions, for every client: the worker fetches a
// parent's checkpoint (GetArtifact) and uploads its own (PutArtifact); `cart export` downloads a
// run's checkpoint (GetCheckpoint). All three move cart.v1.ArtifactChunk streams of at most
// kArtifactChunkBytes each; the first chunk may announce the sha256 and size of the whole.

#include <grpcpp/support/sync_stream.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cart/v1/common.pb.h"

namespace cart::rpc {

inline constexpr size_t kArtifactChunkBytes = 1 << 20;

// Reads `reader` to its end into `path`, atomically (nothing is left at `path` on any error),
// hashing as it goes. The digest must equal `expected_sha256` when that is given, and the
// sha256 and size the first chunk announced when it announced them. Returns the sha256.
// DataLoss naming `what` on a mismatch; the stream's own status when it fails.
absl::StatusOr<std::string> ReceiveArtifact(
    grpc::ClientReaderInterface<cart::v1::ArtifactChunk>& reader, const std::string& path,
    std::string_view expected_sha256, std::string_view what);

// Streams the file at `path` into `writer` (the first chunk carrying its sha256 and size), then
// WritesDone. Returns the sha256; NotFound when the file cannot be read. The caller calls
// Finish for the server's verdict.
absl::StatusOr<std::string> SendArtifact(
    grpc::ClientWriterInterface<cart::v1::ArtifactChunk>& writer, const std::string& path);

}  // namespace cart::rpc
