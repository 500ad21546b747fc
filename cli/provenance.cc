#include "cli/provenance.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/process.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "store/types.h"

namespace cart::cli {

namespace {

namespace fs = std::filesystem;

// What `git -C dir ARGS...` prints, or nullopt when it fails (not a checkout, no git).
std::optional<std::string> Git(const std::string& git, const std::string& dir,
                               std::vector<std::string> args) {
  char name[] = "/tmp/cart-git-XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) return std::nullopt;
  close(fd);
  args.insert(args.begin(), {"-C", dir});
  SpawnOptions options;
  options.output_path = name;
  options.env = {"LC_ALL=C", "GIT_OPTIONAL_LOCKS=0"};  // a submit never writes the index
  std::optional<std::string> out;
  absl::StatusOr<pid_t> pid = Spawn(git, args, options);
  if (pid.ok()) {
    int status = 0;
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      std::ifstream in(name, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      out = text.str();
    }
  }
  unlink(name);
  return out;
}

std::string Chomp(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

cart::v1::SweepProvenance SweepFileProvenance(const std::string& path, const std::string& text,
                                              const std::string& git) {
  cart::v1::SweepProvenance out;
  auto add = [&out](const std::string& key, std::string value) {
    for (char& c : value) {
      if (c == '\n' || c == '\t' || c == '\0') c = ' ';
    }
    if (value.size() > 1024) value = value.substr(0, 1021) + "...";
    cart::v1::EnvironmentItem* item = out.add_items();
    item->set_key(key);
    item->set_value(ValidUtf8(value));
  };
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  add("file.path", ec ? path : absolute.lexically_normal().string());
  Sha256 hash;
  hash.Update(text);
  add("file.sha256", hash.HexDigest());
  const std::string program = FindProgram(git).value_or("");
  const std::string dir = absolute.parent_path().string();
  std::optional<std::string> root;
  if (!program.empty()) root = Git(program, dir, {"rev-parse", "--show-toplevel"});
  if (!root) {
    add("git", program.empty() ? "no git program on PATH" : "not in a git checkout");
    return out;
  }
  add("git.root", Chomp(*root));
  add("git.commit",
      Chomp(Git(program, dir, {"rev-parse", "HEAD"}).value_or("none (no commit yet)")));
  add("git.branch",
      Chomp(Git(program, dir, {"rev-parse", "--abbrev-ref", "HEAD"}).value_or("unknown")));
  const std::string status =
      Chomp(Git(program, dir, {"status", "--porcelain", "--untracked-files=no"}).value_or(""));
  std::vector<std::string> changed;
  for (const std::string& line : Split(status, '\n')) {
    if (line.size() > 3) changed.push_back(line.substr(3));
  }
  add("git.dirty", changed.empty() ? "false" : "true");
  if (!changed.empty()) add("git.changed", StrJoin(changed, ", "));
  // Whether git knows the sweep file itself (an untracked file is in no commit).
  const std::string relative = Chomp(
      Git(program, dir, {"ls-files", "--error-unmatch", "--", absolute.string()}).value_or(""));
  add("file.git", relative.empty() ? "not tracked" : "tracked");
  std::string diff =
      ValidUtf8(Git(program, dir, {"diff", "HEAD", "--no-color", "--no-ext-diff"}).value_or(""));
  if (diff.size() > store::kMaxProvenanceDiffBytes) {
    add("git.diff",
        StrCat("cut to its first ", store::kMaxProvenanceDiffBytes, " of ", diff.size(), " bytes"));
    diff.resize(Utf8Boundary(diff, store::kMaxProvenanceDiffBytes));  // on a character boundary
  }
  out.set_git_diff(diff);
  return out;
}

}  // namespace cart::cli
