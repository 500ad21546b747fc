#include "server/http/request_body.h"

#include <algorithm>

#include "common/strings.h"

namespace cart::server::http {

absl::StatusOr<nlohmann::json> ActionBody(const Request& request,
                                          std::vector<std::string_view> allowed) {
  using nlohmann::json;
  if (request.body.empty()) return json::object();
  json body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  for (const auto& [key, value] : body.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return absl::InvalidArgumentError(
          StrCat("the request body has the key '", ValidUtf8(key.substr(0, 64)), "'; ",
                 allowed.empty() ? std::string("this change takes none")
                                 : StrCat("allowed: ", StrJoin(allowed, ", "))));
    }
  }
  return body;
}

}  // namespace cart::server::http
