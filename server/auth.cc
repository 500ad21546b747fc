#include "server/auth.h"

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::server {
namespace {

constexpr size_t kMinTokenLength = 16;

std::optional<Role> ParseRole(std::string_view text) {
  if (text == "worker") return Role::kWorker;
  if (text == "user") return Role::kUser;
  if (text == "admin") return Role::kAdmin;
  return std::nullopt;
}

// Compares in time independent of where the strings first differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> words;
  for (const std::string& part : Split(line, ' ')) {
    for (const std::string& word : Split(part, '\t')) {
      if (!word.empty()) words.push_back(word);
    }
  }
  return words;
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::string CallerName(const Principal& who) { return StrCat(RoleName(who.role), ":", who.name); }

bool IsAdminCaller(std::string_view caller) { return caller.rfind("admin:", 0) == 0; }

absl::StatusOr<TokenTable> TokenTable::Parse(std::string_view text, std::string_view source) {
  TokenTable table;
  int line_number = 0;
  for (const std::string& raw : Split(text, '\n')) {
    ++line_number;
    std::string_view line = raw;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    const std::vector<std::string> words = Words(line);
    const std::string where = StrCat(source, ":", line_number, ": ");
    if (words.size() != 3) {
      return absl::InvalidArgumentError(
          StrCat(where, "expected '<token> <role> <name>', got ", words.size(), " words"));
    }
    std::optional<Role> role = ParseRole(words[1]);
    if (!role) {
      return absl::InvalidArgumentError(
          StrCat(where, "role '", words[1], "' is not one of worker, user, admin"));
    }
    if (words[0].size() < kMinTokenLength) {
      return absl::InvalidArgumentError(StrCat(where, "the token of '", words[2], "' has ",
                                               words[0].size(), " characters; use at least ",
                                               kMinTokenLength));
    }
    for (const Entry& entry : table.entries_) {
      if (entry.token == words[0]) {
        return absl::InvalidArgumentError(StrCat(where, "the token of '", words[2],
                                                 "' is also the token of '", entry.principal.name,
                                                 "'"));
      }
      // Worker names are id prefixes (MayActAs): one must not cover another box's workers.
      const Principal& other = entry.principal;
      if (*role == Role::kWorker && other.role == Role::kWorker && other.name != words[2] &&
          (MayActAs(other, words[2]) || MayActAs(Principal{words[2], Role::kWorker}, other.name))) {
        return absl::InvalidArgumentError(StrCat(
            where, "worker names '", words[2], "' and '", other.name,
            "' overlap: a worker token covers the ids that start with its name and '-' or '.', so "
            "one could act as the other's workers; rename one"));
      }
    }
    table.entries_.push_back(Entry{words[0], Principal{words[2], *role}});
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::LoadFile(const std::string& path) {
  CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return Parse(text, path);
}

absl::StatusOr<Principal> TokenTable::Check(std::optional<std::string_view> authorization, Api api,
                                            std::string_view method) const {
  if (!enabled()) return Principal{"anonymous", Role::kAdmin};
  if (!authorization) {
    return absl::UnauthenticatedError(
        StrCat(method, ": no 'authorization' metadata; send 'Bearer <token>'"));
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization->substr(0, kBearer.size()) != kBearer) {
    return absl::UnauthenticatedError(
        StrCat(method, ": 'authorization' metadata is not 'Bearer <token>'"));
  }
  const std::string_view token = Trim(authorization->substr(kBearer.size()));
  const Entry* found = nullptr;
  // Every entry is compared, so the time taken does not reveal which one matched.
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(entry.token, token)) found = &entry;
  }
  if (found == nullptr) return absl::UnauthenticatedError(StrCat(method, ": unknown token"));
  const Role role = found->principal.role;
  const bool allowed = role == Role::kAdmin || (api == Api::kWorker && role == Role::kWorker) ||
                       (api == Api::kScheduler && role == Role::kUser);
  if (!allowed) {
    return absl::PermissionDeniedError(
        StrCat(method, ": token '", found->principal.name, "' has role ", RoleName(role),
               "; this call needs ", api == Api::kWorker ? "worker" : "user", " or admin"));
  }
  return found->principal;
}

bool MayActAs(const Principal& who, std::string_view worker_id) {
  switch (who.role) {
    case Role::kAdmin:
      return true;
    case Role::kUser:
      return false;
    case Role::kWorker:
      break;
  }
  if (worker_id.size() < who.name.size() || worker_id.substr(0, who.name.size()) != who.name) {
    return false;
  }
  if (worker_id.size() == who.name.size()) return true;
  const char next = worker_id[who.name.size()];
  return next == '-' || next == '.';
}

}  // namespace cart::server
