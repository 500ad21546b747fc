#pragma once

// Small string helpers. Debian's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat / SimpleAtoi do not accept std::string_view; these do.

#include <charconv>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace cart {

// Concatenates anything that has operator<< (strings, views, numbers, absl::Status).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename Container>
std::string StrJoin(const Container& parts, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const auto& p : parts) {
    if (!first) out += sep;
    first = false;
    out += StrCat(p);
  }
  return out;
}

// Whole-string integer parse; nullopt on any junk, overflow or empty input.
std::optional<int64_t> ParseInt64(std::string_view text);

// `text` with every byte that is not part of a well-formed UTF-8 sequence replaced by '?'
// (protobuf `string` fields must be UTF-8: a log line with a Latin-1 path would break a stream).
std::string ValidUtf8(std::string_view text);
// The offset of the first byte that is not part of a well-formed UTF-8 sequence; nullopt when the
// whole text is UTF-8.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);
// Unicode code points in UTF-8 `text` (what Python's len() counts; continuation bytes skipped).
size_t Utf8Length(std::string_view text);
// The largest `end` <= max(`max_bytes`, 0) that does not split a UTF-8 sequence of `text` (the
// whole size when it fits): text.substr(0, end) is a prefix that ends on a character boundary.
size_t Utf8Boundary(std::string_view text, size_t max_bytes);
// `text` cut to at most `max_bytes` on a character boundary, ending with "…" when cut
// (`max_bytes` >= 3).
std::string Utf8Cut(std::string_view text, size_t max_bytes);
// Whole-string finite double parse (accepts 3e-4, 0.1, -2); nullopt otherwise.
std::optional<double> ParseDouble(std::string_view text);

std::vector<std::string> Split(std::string_view text, char sep);
std::string_view Trim(std::string_view text);
std::string ToLower(std::string_view text);
std::string ToUpper(std::string_view text);
// `value` with `decimals` digits after the point ("12.3" for 12.34, 1); "nan", "inf" as printf.
std::string Fixed(double value, int decimals);
// `value` in scientific notation with two decimals ("3.00e-04"), as learning rates are written.
std::string Sci(double value);

// A yes/no setting as every file CART Lab reads spells it (run configs, sweep files, cartd's
// config, claims files): true/false, on/off, yes/no or 1/0, in any case (YAML 1.1 reads a bare
// on/off as a boolean); nullopt otherwise. Errors name the spellings with kBoolSpellings.
std::optional<bool> ParseBool(std::string_view text);
inline constexpr char kBoolSpellings[] = "true, false (or on, off, yes, no)";

// "host:port" or "[v6]:port" split at its last colon, the brackets dropped; nullopt without a
// colon. `port` is the text after it as a whole number (nullopt when it is not one).
struct HostPort {
  std::string host;
  std::optional<int64_t> port;
};
std::optional<HostPort> SplitHostPort(std::string_view address);

// One CSV field as RFC 4180 writes it: quoted, with its quotes doubled, when it holds a comma, a
// quote, or a line break (\n or \r); as it is otherwise.
std::string CsvField(std::string_view text);

// `bytes` random bytes from std::random_device as 2 * `bytes` lowercase hex digits (tokens,
// request ids, store ids).
std::string RandomHex(size_t bytes);

// The message of a Status as a std::string.
inline std::string Message(const absl::Status& s) { return std::string(s.message()); }

}  // namespace cart
