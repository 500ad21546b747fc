#pragma once

// The report half that `cart up --report` shares with `cart report` (report_command.cc).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "report/report.h"
#include "rpc/client.h"

namespace cart::cli {

// Applies "ROLE=SWEEP" overrides (roles: stage1, stage2, baselines, ablations, faithfulness,
// leak, variable_r). InvalidArgument names an entry without '=' or an unknown role.
absl::Status ApplyReportSweeps(const std::vector<std::string>& overrides,
                               report::StudySweeps& sweeps);

// Builds the report from cartd at `client` and writes it to options.out_dir; prints a summary
// line and the report's path to stdout.
absl::Status WriteServiceReport(const rpc::ClientConfig& client,
                                const report::ReportOptions& options);

}  // namespace cart::cli
