#pragma once

// Error propagation helpers for absl::Status / absl::StatusOr at module boundaries.

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"

namespace cart {

// `status` with `prefix` before its message, its code and payloads kept (a payload such as
// common/file.h's kNoSpacePayload says what kind of failure it is). OK stays OK.
inline absl::Status WithContext(const absl::Status& status, std::string_view prefix) {
  if (status.ok()) return status;
  absl::Status out(status.code(), std::string(prefix) + std::string(status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace cart

#define CART_CONCAT_INNER_(a, b) a##b
#define CART_CONCAT_(a, b) CART_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define CART_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status cart_status_ = (expr);        \
    if (!cart_status_.ok()) return cart_status_; \
  } while (0)

// `CART_ASSIGN_OR_RETURN(auto x, F());` declares x from a StatusOr or returns its error.
#define CART_ASSIGN_OR_RETURN(lhs, expr) \
  CART_ASSIGN_OR_RETURN_IMPL_(CART_CONCAT_(cart_statusor_, __LINE__), lhs, expr)
#define CART_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
