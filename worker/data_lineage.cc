#include "worker/data_lineage.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/time/time.h"
#include "common/status.h"
#include "common/strings.h"
#include "proto/data_identity.h"
#include "worker/unary_call.h"

namespace cart::worker {
namespace {

cart::v1::DataIdentity ToProto(const config::DataFile& file, const data::FileIdentity& id) {
  cart::v1::DataIdentity d;
  d.set_role(file.role);
  d.set_path(file.path);
  data::SetIdentity(id, &d);
  return d;
}

std::string When(int64_t us) {
  if (us <= 0) return "";
  return StrCat(" at ", absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMicros(us),
                                         absl::UTCTimeZone()));
}

}  // namespace

absl::StatusOr<std::vector<cart::v1::DataIdentity>> CheckRunData(
    const config::RunConfig& config, bool with_train,
    const google::protobuf::RepeatedPtrField<cart::v1::DataIdentity>& recorded,
    data::FileHashCache* cache) {
  std::vector<cart::v1::DataIdentity> unrecorded;
  for (const config::DataFile& file : config::DataFiles(config, with_train)) {
    absl::StatusOr<data::FileIdentity> actual = file.token_file
                                                    ? data::IdentifyTokenFile(file.path, cache)
                                                    : data::IdentifyPlainFile(file.path, cache);
    if (!actual.ok()) {
      return absl::Status(actual.status().code(),
                          StrCat(file.role, " data: ", Message(actual.status())));
    }
    auto it = std::find_if(recorded.begin(), recorded.end(), [&](const auto& d) {
      return d.role() == file.role && !d.sha256().empty();
    });
    if (it == recorded.end()) {
      unrecorded.push_back(ToProto(file, *actual));
      continue;
    }
    if (std::optional<std::string> differs =
            data::IdentityMismatch(data::IdentityOf(*it), *actual)) {
      return absl::FailedPreconditionError(StrCat(
          "data lineage: ", file.role, " file ", file.path,
          " is not the file this run was bound to (", *differs, "); its identity was recorded by ",
          it->recorded_by().empty() ? std::string("cartd") : it->recorded_by(),
          When(it->recorded_us()),
          ". Put that file back at this path on this worker, or train a new run on the new data "
          "(docs/architecture.md \"Data lineage\")"));
    }
  }
  return unrecorded;
}

absl::Status SendRunData(cart::v1::WorkerService::Stub& stub, const rpc::ClientConfig& client,
                         const std::string& worker_id, int64_t run_id, int64_t attempt,
                         const std::vector<cart::v1::DataIdentity>& files) {
  cart::v1::RecordRunDataRequest request;
  request.set_run_id(run_id);
  request.set_attempt(attempt);
  request.set_worker_id(worker_id);
  for (const cart::v1::DataIdentity& f : files) *request.add_files() = f;
  return CallWithRetries(client, [&](grpc::ClientContext& ctx) {
    cart::v1::RecordRunDataResponse response;
    return stub.RecordRunData(&ctx, request, &response);
  });
}

}  // namespace cart::worker
