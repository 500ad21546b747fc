#pragma once

// The body of a change sent to the dashboard's API: empty, or a JSON object with no keys but
// `allowed` (a misspelt key is refused naming it, not ignored). Shared by the dashboard's
// changes and the notification endpoints.

#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_server.h"

namespace cart::server::http {

// An empty body is {}. InvalidArgument for a body that is not a JSON object, or a key not
// allowed (the message names it and the allowed ones).
absl::StatusOr<nlohmann::json> ActionBody(const Request& request,
                                          std::vector<std::string_view> allowed);

}  // namespace cart::server::http
