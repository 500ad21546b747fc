#pragma once

// Where a sweep file comes from, taken by `cart sweep submit` and sent with the sweep
// (docs/architecture.md "Sweep provenance"): the file's path and sha256 and, where it sits in a
// git checkout, the commit, branch, whether tracked files differ from it (and which), and the
// diff of those files. A file outside any git checkout, or a machine without git, is fine and
// says so in the record.

#include <string>

#include "cart/v1/scheduler.pb.h"

namespace cart::cli {

// The provenance of the sweep file at `path` whose text is `text`. `git` is the git program
// ("git": looked up on PATH).
cart::v1::SweepProvenance SweepFileProvenance(const std::string& path, const std::string& text,
                                              const std::string& git = "git");

}  // namespace cart::cli
