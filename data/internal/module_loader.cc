#include "data/internal/module_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace cart::data::internal {

void* LoadModuleEntry(const ModuleSpec& spec, std::string* error) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(spec.env); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  }
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  candidates.push_back(exe + "/" + spec.file_name);
  candidates.push_back(exe + "/../lib/" + spec.file_name);
  if (spec.compiled_path != nullptr) candidates.push_back(spec.compiled_path);
  std::string tried;
  for (const std::string& path : candidates) {
    if (!std::filesystem::exists(path)) {
      tried += " " + path;
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      *error = std::string("cannot load ") + path + ": " + dlerror();
      return nullptr;
    }
    void* entry = dlsym(handle, spec.entry);
    if (entry == nullptr) *error = path + " has no " + spec.entry;
    return entry;
  }
  *error = std::string(spec.what) + " module " + spec.file_name + " not found (looked at" + tried +
           "; set " + spec.env + ")";
  return nullptr;
}

}  // namespace cart::data::internal
