// The YAML a run config is written as (config/config.h ToYaml), read back by the same parser.

#include <map>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/internal/keys.h"

namespace cart::config {

using internal::Keys;

std::string ToYaml(const RunConfig& config) {
  // Written by hand rather than with YAML::Emitter: a sweep writes one config per run, and the
  // emitter's per-scalar style checks made it most of a 10,000-run submit. The text is the one the
  // emitter wrote (plain scalars where they read back as themselves, double quotes otherwise).
  std::string out;
  out.reserve(1024);
  for (const auto& k : Keys()) {
    const std::string value = k.get(config);
    // Written only when set, so that configs from before the key existed read back unchanged.
    if (k.name == "lm_eval" && value.empty()) continue;
    out += k.name;
    out += ": ";
    out += YamlScalar(value);
    out += '\n';
  }
  auto block = [&out](const char* name, const std::map<std::string, std::string>& entries) {
    out += name;
    out += ":\n";
    if (entries.empty()) out += "  {}\n";
    for (const auto& [key, value] : entries) {
      out += "  ";
      out += YamlScalar(key);
      out += ": ";
      out += YamlScalar(value);
      out += '\n';
    }
  };
  block("val_data", config.data.val_data);
  if (!config.data.tasks.empty()) block("tasks", config.data.tasks);
  return out;
}

std::string YamlScalar(std::string_view text) {
  static constexpr std::string_view kIndicators = "-?:,[]{}#&*!|>'\"%@`";
  bool plain = !text.empty() && text.front() != ' ' && text.back() != ' ' && text.back() != ':' &&
               text != "~" && text != "null" && text != "Null" && text != "NULL" &&
               text.find(": ") == std::string_view::npos &&
               text.find(" #") == std::string_view::npos;
  if (plain && kIndicators.find(text.front()) != std::string_view::npos) {
    // A leading '-' is plain when a character other than a space follows ("-1", "-x").
    plain = text.front() == '-' && text.size() > 1 && text[1] != ' ';
  }
  for (size_t i = 0; plain && i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    plain = c >= 0x20 && c != 0x7f;  // no control characters; UTF-8 bytes are fine
  }
  if (plain) return std::string(text);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

}  // namespace cart::config
