#pragma once

// Data lineage on the client (docs/architecture.md "Runs are bound to their data by content"): the
// identities of the data files a sweep names, taken where it is submitted, so that each run is
// bound to the bytes its submitter saw; and `cart data identify`.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cart/v1/common.pb.h"
#include "config/sweep.h"

namespace cart::data {
struct FileIdentity;
}

namespace cart::cli {

// The wire form of a file's identity, by path (role empty).
cart::v1::DataIdentity IdentityProto(const std::string& path, const data::FileIdentity& id);

// The identities of the data files `spec` names (config::SweepDataPaths) that this machine can
// read, by path (role empty). A file that is missing here is left out, for the first worker to
// record, and its path added to `missing`. DataLoss naming the file when its bytes do not match
// its metadata; other read errors as they are.
absl::StatusOr<std::vector<cart::v1::DataIdentity>> SweepDataIdentities(
    const config::SweepSpec& spec, std::vector<std::string>* missing);

}  // namespace cart::cli
