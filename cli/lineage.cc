#include "cli/lineage.h"

#include "common/status.h"
#include "data/identity.h"
#include "proto/data_identity.h"

namespace cart::cli {

cart::v1::DataIdentity IdentityProto(const std::string& path, const data::FileIdentity& id) {
  cart::v1::DataIdentity d;
  d.set_path(path);
  data::SetIdentity(id, &d);
  return d;
}

absl::StatusOr<std::vector<cart::v1::DataIdentity>> SweepDataIdentities(
    const config::SweepSpec& spec, std::vector<std::string>* missing) {
  std::vector<cart::v1::DataIdentity> out;
  for (const auto& [path, token_file] : config::SweepDataPaths(spec)) {
    absl::StatusOr<data::FileIdentity> id = token_file ? data::IdentifyTokenFile(path, nullptr)
                                                       : data::IdentifyPlainFile(path, nullptr);
    if (absl::IsNotFound(id.status())) {
      if (missing != nullptr) missing->push_back(path);
      continue;
    }
    if (!id.ok()) return id.status();
    out.push_back(IdentityProto(path, *id));
  }
  return out;
}

}  // namespace cart::cli
