#include "common/yaml.h"

#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "common/strings.h"

namespace cart {
namespace {

absl::Status CheckUniqueKeys(const YAML::Node& node, std::string_view source) {
  if (node.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      const int line = kv.first.Mark().line + 1;
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("<complex>");
      auto [it, fresh] = first_line.emplace(key, line);
      if (!fresh) {
        return absl::InvalidArgumentError(StrCat(source, ":", line, ": '", key,
                                                 "' is given twice in one mapping (first at line ",
                                                 it->second, ")"));
      }
      if (absl::Status s = CheckUniqueKeys(kv.second, source); !s.ok()) return s;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (absl::Status s = CheckUniqueKeys(item, source); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<YAML::Node> LoadYaml(std::string_view text, std::string_view source) {
  if (std::optional<size_t> bad = FirstInvalidUtf8(text)) {
    const std::string_view before = text.substr(0, *bad);
    const size_t line_start = before.rfind('\n');
    const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
    const size_t column = *bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    static constexpr char kHex[] = "0123456789abcdef";
    const auto byte = static_cast<unsigned char>(text[*bad]);
    return absl::InvalidArgumentError(StrCat(source, ":", line, ": not UTF-8 (byte 0x",
                                             std::string{kHex[byte >> 4], kHex[byte & 0xf]},
                                             " at column ", column, ")"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp stops at 2,000 levels and says only "bad file".
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": nested ", e.depth(),
               " levels deep ([ or { inside one another); a sweep or config file needs a few"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ": YAML syntax error: ", e.msg));
  }
  if (absl::Status unique = CheckUniqueKeys(root, source); !unique.ok()) return unique;
  return root;
}

}  // namespace cart
