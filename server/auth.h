#pragma once

// Bearer-token authentication and role checks (docs/design.md "Security"). Every RPC carries
// `authorization: Bearer <token>` metadata; the token's role decides which service it may call:
// worker -> WorkerService only, user -> SchedulerService only, admin -> both.
//
// The tokens file has one token per line, "<token> <role> <name>", '#' starting a comment:
//
//   # token                            role    name
//   8c1f0a7d2b9e4c65a3f1d0e9b8c7a6f5   worker  labbox3
//   0f9e8d7c6b5a49382716a5b4c3d2e1f0   user    alice
//
// Tokens are at least 16 characters; names are what the audit trail shows ("user:alice").
//
// A worker token is bound to the worker ids its name covers (MayActAs): the token named
// "labbox3" serves the workers "labbox3", "labbox3-gpu0", "labbox3.1", and no other, so a stolen
// or misconfigured box token cannot register as, take jobs for, or report on the runs of another
// box's workers.
//
// Thread-safety: a TokenTable is immutable after Parse and safe to share.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::server {

enum class Role { kWorker, kUser, kAdmin };
std::string_view RoleName(Role role);  // "worker", "user", "admin"

// Which API a call belongs to.
enum class Api { kScheduler, kWorker };

// Who is calling.
struct Principal {
  std::string name;
  Role role = Role::kAdmin;
};

// A caller as cartd records it (a sweep's owner, an action's "who", a per-caller bound, a
// subscription's owner): "<role>:<name>" ("admin:ann", "user:bob", "worker:box3"). The one
// writer of that form, and the one reader of its role; store::OwnerName reads its name.
std::string CallerName(const Principal& who);
bool IsAdminCaller(std::string_view caller);

class TokenTable {
 public:
  // An empty table: authentication is off and every caller is the admin "anonymous" (only
  // allowed on loopback, or with --insecure; see ValidateServerConfig in server/server.h).
  TokenTable() = default;

  // Parses a tokens file's text. InvalidArgument "<source>:<line>: ..." for a malformed line, an
  // unknown role, a token shorter than 16 characters or a token given twice.
  static absl::StatusOr<TokenTable> Parse(std::string_view text, std::string_view source);
  // Reads and parses a file; NotFound when it does not exist.
  static absl::StatusOr<TokenTable> LoadFile(const std::string& path);

  bool enabled() const { return !entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // Checks one call. `authorization` is the metadata value (nullopt when absent).
  // UNAUTHENTICATED when it is absent, not "Bearer <token>", or an unknown token;
  // PERMISSION_DENIED when the token's role may not call `api` (message names the token's name,
  // its role and the method). With authentication off, returns the admin "anonymous".
  absl::StatusOr<Principal> Check(std::optional<std::string_view> authorization, Api api,
                                  std::string_view method) const;

 private:
  struct Entry {
    std::string token;
    Principal principal;
  };
  std::vector<Entry> entries_;
};

// Whether `who` may act as the worker `worker_id`: admins always; a worker when the id is its
// token's name, or that name followed by '-' or '.' and more; users never.
bool MayActAs(const Principal& who, std::string_view worker_id);

}  // namespace cart::server
