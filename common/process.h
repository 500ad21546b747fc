#pragma once

// Starting another program: the one place the project forks and execs (`cart up`'s workers, the
// tests' cartd and cart-worker processes, the benchmarks' cartd). `cart` handing a command to
// cart-torch replaces itself with execv instead (cli/main.cc) and is not a child process.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cart {

struct SpawnOptions {
  // Environment entries "NAME=VALUE" set in the child on top of this process's environment (an
  // entry replaces the inherited variable of that name).
  std::vector<std::string> env;
  // Names removed from the inherited environment (before `env` is applied).
  std::vector<std::string> unset_env;
  // Where the child's stdout and stderr go, appended; empty: inherited. "/dev/null" discards.
  std::string output_path;
  // The child is killed (SIGKILL) when this process dies, even by SIGKILL: test processes.
  bool die_with_parent = false;
  // The child leads a process group of its own, so signals sent to ours do not reach it.
  bool own_process_group = false;
};

// Starts `exe` with `args` (argv[0] is `exe`) and returns its pid; the caller waits for it.
// Internal naming `exe` when it cannot be started (an exec failure shows as exit status 127).
absl::StatusOr<pid_t> Spawn(const std::string& exe, const std::vector<std::string>& args,
                            const SpawnOptions& options = {});

// `program` as exec needs it (Spawn does not search PATH): a name with a '/' as it is, else the
// first executable of that name on PATH; nullopt when it is not executable or not found.
std::optional<std::string> FindProgram(const std::string& program);

// Puts the calling thread (only it: on Linux a nice value is a thread's) at `niceness` unless it
// already runs at that or lower, and its disk I/O at the lowest level of the best-effort class:
// background work (checkpoint writes and uploads) takes what the training threads leave. Threads
// it starts later inherit both. Best effort: what the kernel refuses is left as it was.
void LowerThisThreadsPriority(int niceness);
// The calling thread's nice value.
int ThisThreadsNiceness();

// `text` with each `$(NAME)` replaced by the value of environment variable NAME (letters, digits,
// '_'; not starting with a digit), for runtimes that leave a container's args unexpanded where
// Kubernetes expands them (podman kube play). Stricter than Kubernetes: an unset variable or a
// malformed reference is an error that names it, and only `$$(` is an escape (for a literal
// `$(`), not `$$`. Under Kubernetes the kubelet has expanded (and unescaped) the text already, so
// a literal `$(` cannot reach the program. `lookup` stands for getenv (tests).
absl::StatusOr<std::string> ExpandEnvReferences(std::string_view text,
                                                const char* (*lookup)(const char* name) = nullptr);

}  // namespace cart
