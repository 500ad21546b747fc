#include "worker/environment.h"

#include <ATen/Version.h>
#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/file.h"
#include "common/git_info.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "common/version.h"
#include "train/device.h"
#include "train/optimizer.h"

namespace cart::worker {

namespace {

// One line of at most 1,024 bytes: what cartd stores.
std::string OneLine(std::string value) {
  for (char& c : value) {
    if (c == '\n' || c == '\r' || c == '\t' || c == '\0') c = ' ';
  }
  if (value.size() > 1024) value.resize(1024);
  return value;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value after "KEY=" in /etc/os-release, unquoted.
std::string OsRelease(const std::string& key) {
  std::istringstream in(ReadText("/etc/os-release"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + "=", 0) != 0) continue;
    std::string value = line.substr(key.size() + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    return value;
  }
  return "";
}

std::string CpuModel() {
  std::istringstream in(ReadText("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return std::string(Trim(line.substr(colon + 1)));
  }
  return "";
}

// The container the process runs in, if it can tell: what CART_CONTAINER_IMAGE names (deploy/k8s
// and the image set it), else the runtime's marker file.
std::string Container() {
  if (const char* image = std::getenv("CART_CONTAINER_IMAGE"); image != nullptr && *image != 0) {
    return image;
  }
  std::error_code ec;
  if (std::filesystem::exists("/.dockerenv", ec)) return "docker (image not named)";
  if (std::filesystem::exists("/run/.containerenv", ec)) return "podman (image not named)";
  return "none";
}

// OpenBLAS's own description of its build (openblas_get_config), when the BLAS loaded is it.
std::string OpenBlasConfig() {
  using Config = char* (*)();
  auto config = reinterpret_cast<Config>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  return config != nullptr ? std::string(config()) : std::string();
}

EnvironmentItems Collect() {
  EnvironmentItems items;
  auto add = [&items](const char* key, std::string value) {
    items.emplace_back(key, OneLine(value.empty() ? std::string("unknown") : std::move(value)));
  };
  add("cart.version", kVersion);
  add("cart.worker_protocol", StrCat(kWorkerProtocol));
  add("cart.binary_sha256", Sha256File("/proc/self/exe"));
  add("cart.git_commit", kGitCommit);
  add("cart.git_dirty", kGitDirty);
  std::string torch_blas = "unknown";
  for (auto& [key, value] : TorchBuildItems(at::show_config())) {
    if (key == "torch.blas") torch_blas = value;
    items.emplace_back(key, value);
  }
  const std::string maps = ReadText("/proc/self/maps");
  add("torch.library", MappedLibrary(maps, {"libtorch_cpu.so", "libtorch.so"}));
  // A BLAS of its own (Debian's LibTorch calls the system's), or none: PyTorch's wheels link MKL
  // into libtorch_cpu itself.
  std::string blas = MappedLibrary(maps, {"libopenblas", "libblas", "libmkl_rt", "libcblas"});
  if (blas.empty()) blas = StrCat("none mapped: built into LibTorch (", torch_blas, ")");
  add("blas.library", blas);
  if (std::string config = OpenBlasConfig(); !config.empty()) add("blas.config", config);
  add("cpu.model", CpuModel());
  add("cpu.cores", StrCat(std::thread::hardware_concurrency()));
  add("os", OsRelease("PRETTY_NAME"));
  utsname uts{};
  if (uname(&uts) == 0) {
    add("kernel", StrCat(uts.sysname, " ", uts.release, " ", uts.machine));
    add("host", uts.nodename);
  }
  add("container", Container());
  return items;
}

}  // namespace

EnvironmentItems TorchBuildItems(const std::string& show_config) {
  // "Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, ..., TORCH_VERSION=2.15.0, USE_CUDA=1"
  auto setting = [&](const std::string& key) -> std::string {
    const std::string needle = key + "=";
    size_t at = 0;
    while ((at = show_config.find(needle, at)) != std::string::npos) {
      if (at == 0 || show_config[at - 1] == ' ' || show_config[at - 1] == ',') break;
      at += needle.size();
    }
    if (at == std::string::npos) return "";
    const size_t from = at + needle.size();
    const size_t to = show_config.find_first_of(",\n", from);
    return std::string(
        Trim(show_config.substr(from, to == std::string::npos ? std::string::npos : to - from)));
  };
  const std::string cuda = setting("USE_CUDA");
  const bool with_cuda = cuda == "1" || cuda == "ON" || cuda == "on";
  EnvironmentItems items;
  const std::string version = setting("TORCH_VERSION");
  items.emplace_back("torch.version", version.empty() ? std::string("unknown") : OneLine(version));
  if (std::string commit = setting("COMMIT_SHA"); !commit.empty()) {
    items.emplace_back("torch.commit", OneLine(commit));
  }
  items.emplace_back("torch.cuda",
                     with_cuda ? OneLine(setting("CUDA_VERSION")) : "none (CPU build)");
  if (with_cuda) {
    const std::string cudnn = setting("CUDNN_VERSION");
    items.emplace_back("torch.cudnn", cudnn.empty() ? std::string("none") : OneLine(cudnn));
  }
  const std::string blas = setting("BLAS_INFO");
  items.emplace_back("torch.blas", blas.empty() ? std::string("unknown") : OneLine(blas));
  return items;
}

std::string MappedLibrary(const std::string& maps, const std::vector<std::string>& prefixes) {
  std::istringstream in(maps);
  for (std::string line; std::getline(in, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = std::filesystem::path(path).filename().string();
    for (const std::string& prefix : prefixes) {
      if (name.rfind(prefix, 0) == 0) return path;
    }
  }
  return "";
}

const EnvironmentItems& ProcessEnvironment() {
  static const EnvironmentItems* const kItems = new EnvironmentItems(Collect());
  return *kItems;
}

EnvironmentItems AttemptEnvironment(const DeviceDescription& device,
                                    const std::string& torch_device, const std::string& precision,
                                    int64_t threads, bool cuda_graph) {
  EnvironmentItems items = ProcessEnvironment();
  auto add = [&items](const char* key, const std::string& value) {
    if (!value.empty()) items.emplace_back(key, OneLine(value));
  };
  add("device", torch_device);
  add("device.kind", device.kind);
  add("device.name", device.name);
  add("device.stands_in_for", device.stands_in_for);
  add("device.memory_mib", StrCat(device.memory_mib));
  if (device.kind == "cuda") {
    add("gpu.uuid", device.uuid);
    add("gpu.compute_capability", device.compute_capability);
    add("gpu.vbios", device.vbios);
    add("gpu.driver", device.driver_version);
  }
  add("precision", precision);
  // The step's kernels where they change its floats (docs/gpu.md): the trainer's defaults here.
  add("step.optimizer", train::StepKernelsName(train::DefaultStepKernels()));
  add("step.projections",
      train::DefaultMergedProjections(c10::Device(torch_device)) ? "merged" : "separate");
  add("step.graph", cuda_graph ? "cuda graph" : "none");
  add("threads", threads > 0 ? StrCat(threads) : std::string("all cores"));
  return items;
}

}  // namespace cart::worker
