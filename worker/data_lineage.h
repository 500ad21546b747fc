#pragma once

// Data lineage on the worker (docs/architecture.md "Runs are bound to their data by content"):
// before an attempt trains or evaluates, every data file its run reads is compared with the
// identity cartd recorded for it (at submit, or by the run's first worker). A file that differs
// fails the attempt, naming the file and both identities: a run never goes on, silently, on other
// bytes than it started on. Files the run has no identity for yet are recorded with cartd
// (RecordRunData).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cart/v1/worker.grpc.pb.h"
#include "config/config.h"
#include "data/identity.h"
#include "rpc/client.h"

namespace cart::worker {

// The identities of the files `config` reads (train_data only when `with_train`), hashed here
// (through `cache`, which may be null). FailedPrecondition "data lineage: …" when one differs
// from its identity in `recorded` (Job.data), naming the role, the path, what differs and who
// recorded it; the file's own errors (missing, unreadable, bytes not matching its .json) as they
// are. Returns the identities to record: the files `recorded` holds none for.
absl::StatusOr<std::vector<cart::v1::DataIdentity>> CheckRunData(
    const config::RunConfig& config, bool with_train,
    const google::protobuf::RepeatedPtrField<cart::v1::DataIdentity>& recorded,
    data::FileHashCache* cache);

// Sends `files` to cartd (RecordRunData), retrying a failed call a few times with backoff.
// FailedPrecondition when the attempt is fenced; the last error otherwise.
absl::Status SendRunData(cart::v1::WorkerService::Stub& stub, const rpc::ClientConfig& client,
                         const std::string& worker_id, int64_t run_id, int64_t attempt,
                         const std::vector<cart::v1::DataIdentity>& files);

}  // namespace cart::worker
