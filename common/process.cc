#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/strings.h"

extern char** environ;

namespace cart {
namespace {

std::string_view NameOf(std::string_view entry) { return entry.substr(0, entry.find('=')); }

bool Listed(std::string_view name, const std::vector<std::string>& entries, bool names_only) {
  for (const std::string& e : entries) {
    if ((names_only ? std::string_view(e) : NameOf(e)) == name) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const std::string& exe, const std::vector<std::string>& args,
                            const SpawnOptions& options) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view name = NameOf(*e);
    if (Listed(name, options.unset_env, true) || Listed(name, options.env, false)) continue;
    env_text.emplace_back(*e);
  }
  env_text.insert(env_text.end(), options.env.begin(), options.env.end());
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(StrCat("cannot start ", exe, ": ", std::strerror(errno)));
  if (pid == 0) {
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
    }
    if (options.own_process_group) setpgid(0, 0);
    if (!options.output_path.empty()) {
      const int fd = open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2) close(fd);
      }
    }
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int ThisThreadsNiceness() {
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

void LowerThisThreadsPriority(int niceness) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (niceness > ThisThreadsNiceness()) setpriority(PRIO_PROCESS, tid, niceness);
  // ioprio_set(IOPRIO_WHO_PROCESS, tid, class best-effort (2) << 13 | level 7): glibc has no
  // wrapper.
  constexpr int kWhoProcess = 1, kClassBestEffort = 2, kClassShift = 13, kLowestLevel = 7;
  syscall(SYS_ioprio_set, kWhoProcess, static_cast<int>(tid),
          (kClassBestEffort << kClassShift) | kLowestLevel);
}

std::optional<std::string> FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), X_OK) == 0 ? std::optional<std::string>(program) : std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(start, colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> ExpandEnvReferences(std::string_view text,
                                                const char* (*lookup)(const char* name)) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 3, "$$(") == 0) {
      out += "$(";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "$(") != 0) {
      out += text[i++];
      continue;
    }
    const size_t close = text.find(')', i + 2);
    const std::string name(text.substr(i + 2, close == std::string_view::npos ? 0 : close - i - 2));
    const bool valid = close != std::string_view::npos && !name.empty() &&
                       !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(),
                                   [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!valid) {
      return absl::InvalidArgumentError(StrCat(
          "'", text, "': '$(' at offset ", i,
          " must start a reference $(NAME) to an environment variable (letters, digits, '_'); "
          "write $$( for a literal $("));
    }
    const char* value = lookup != nullptr ? lookup(name.c_str()) : std::getenv(name.c_str());
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("'", text, "': $(", name, ") names an environment variable that is not set"));
    }
    out += value;
    i = close + 1;
  }
  return out;
}

}  // namespace cart
