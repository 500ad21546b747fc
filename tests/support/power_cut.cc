// An LD_PRELOAD library that keeps, beside a directory, only what a power cut would leave of it:
// the bytes each file held when it was last fsync'ed (or fdatasync'ed). A test runs cartd with
//   LD_PRELOAD=libcart_power_cut.so CART_POWER_CUT_DIR=<data dir> CART_POWER_CUT_COPY=<copy dir>
// kills it with SIGKILL, and restarts it on the copy: every write the kernel had only in its page
// cache is gone, as after a power cut, and nothing that was flushed is.
//
// At each fsync or fdatasync of a file under the directory, the whole file is copied into the
// copy (atomically: a temporary file renamed over); a rename or an unlink under the directory is
// done in the copy too. Directory fsyncs are taken as done (renames count as durable), and
// memory-mapped files (SQLite's -shm index) are never fsync'ed, so they are absent from the copy,
// as SQLite expects after a crash.

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>

namespace {

std::mutex& Lock() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

const char* Env(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// `path` relative to CART_POWER_CUT_DIR, or empty when it is not under it.
std::string Relative(const std::string& path) {
  const char* dir = Env("CART_POWER_CUT_DIR");
  if (dir == nullptr || Env("CART_POWER_CUT_COPY") == nullptr) return "";
  const std::string root = dir;
  if (path.size() <= root.size() + 1 || path.compare(0, root.size(), root) != 0 ||
      path[root.size()] != '/') {
    return "";
  }
  return path.substr(root.size() + 1);
}

std::string Copy(const std::string& relative) {
  return std::string(Env("CART_POWER_CUT_COPY")) + "/" + relative;
}

// Absolute path of `path` as the process sees it (relative paths against the cwd).
std::string Absolute(const char* path) {
  if (path == nullptr) return "";
  if (path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

void MakeParents(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
    mkdir(path.substr(0, at).c_str(), 0700);
  }
}

// Copies what file descriptor `fd` holds now into the copy.
void Persist(int fd) {
  char link[64];
  char target[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return;
  target[n] = '\0';
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;  // a directory's fsync: nothing
  const std::string relative = Relative(target);
  if (relative.empty()) return;
  std::lock_guard<std::mutex> lock(Lock());
  const std::string out = Copy(relative);
  const std::string tmp = out + ".power-cut-tmp";
  MakeParents(out);
  const int in = open(target, O_RDONLY | O_CLOEXEC);
  if (in < 0) return;
  const int dst = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (dst >= 0) {
    char buf[1 << 16];
    for (ssize_t got; (got = read(in, buf, sizeof buf)) > 0;) {
      if (write(dst, buf, static_cast<size_t>(got)) != got) break;
    }
    close(dst);
    rename(tmp.c_str(), out.c_str());
  }
  close(in);
}

template <class F>
F Next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// After a flush that returned `r`: what it flushed goes to the copy; `r` and errno unchanged.
int Flushed(int r, int fd) {
  const int saved = errno;
  if (r == 0) Persist(fd);
  errno = saved;
  return r;
}

}  // namespace

extern "C" {

int fsync(int fd) {
  static auto real = Next<int (*)(int)>("fsync");
  return Flushed(real(fd), fd);
}

int fdatasync(int fd) {
  static auto real = Next<int (*)(int)>("fdatasync");
  return Flushed(real(fd), fd);
}

int rename(const char* from, const char* to) {
  static auto real = Next<int (*)(const char*, const char*)>("rename");
  const int r = real(from, to);
  const int saved = errno;
  const std::string a = Relative(Absolute(from)), b = Relative(Absolute(to));
  if (r == 0 && !a.empty() && !b.empty()) {
    std::lock_guard<std::mutex> lock(Lock());
    MakeParents(Copy(b));
    real(Copy(a).c_str(), Copy(b).c_str());  // nothing to move when `from` was never flushed
  }
  errno = saved;
  return r;
}

int unlink(const char* path) {
  static auto real = Next<int (*)(const char*)>("unlink");
  const int r = real(path);
  const int saved = errno;
  const std::string relative = Relative(Absolute(path));
  if (r == 0 && !relative.empty()) {
    std::lock_guard<std::mutex> lock(Lock());
    real(Copy(relative).c_str());
  }
  errno = saved;
  return r;
}

}  // extern "C"
