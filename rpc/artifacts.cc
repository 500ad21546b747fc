#include "rpc/artifacts.h"

#include <filesystem>
#include <fstream>

#include "common/file.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/client.h"

namespace cart::rpc {

absl::StatusOr<std::string> ReceiveArtifact(
    grpc::ClientReaderInterface<cart::v1::ArtifactChunk>& reader, const std::string& path,
    std::string_view expected_sha256, std::string_view what) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  CART_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Open(path));
  Sha256 hash;
  std::string announced_sha;
  int64_t announced_size = -1, received = 0;
  bool first = true;
  cart::v1::ArtifactChunk chunk;
  absl::Status write_status;
  while (reader.Read(&chunk)) {
    if (first) {
      announced_sha = chunk.sha256();
      if (!announced_sha.empty()) announced_size = chunk.size_bytes();
      first = false;
    }
    hash.Update(chunk.data());
    received += static_cast<int64_t>(chunk.data().size());
    // Keep reading after a failed write: Finish must see the stream to its end.
    if (write_status.ok()) write_status = out.Write(chunk.data());
  }
  CART_RETURN_IF_ERROR(FromGrpc(reader.Finish()));
  CART_RETURN_IF_ERROR(write_status);
  const std::string got = hash.HexDigest();
  if (!expected_sha256.empty() && got != expected_sha256) {
    return absl::DataLossError(
        StrCat(what, " arrived with sha256 ", got, "; expected ", expected_sha256));
  }
  if (!announced_sha.empty() && (got != announced_sha || received != announced_size)) {
    return absl::DataLossError(StrCat(what, " arrived as ", received, " bytes with sha256 ", got,
                                      "; cartd announced ", announced_size, " bytes, ",
                                      announced_sha));
  }
  CART_RETURN_IF_ERROR(out.Commit());
  return got;
}

absl::StatusOr<std::string> SendArtifact(
    grpc::ClientWriterInterface<cart::v1::ArtifactChunk>& writer, const std::string& path) {
  const std::string sha = Sha256File(path);
  if (sha.empty()) return absl::NotFoundError(StrCat("cannot read ", path));
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  std::ifstream in(path, std::ios::binary);
  std::string buf(kArtifactChunkBytes, '\0');
  bool first = true;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0 && !first) break;
    cart::v1::ArtifactChunk chunk;
    if (first) {
      chunk.set_sha256(sha);
      chunk.set_size_bytes(size);
      first = false;
    }
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    if (!writer.Write(chunk)) break;  // the server ended the stream: Finish says why
  }
  writer.WritesDone();
  return sha;
}

}  // namespace cart::rpc
