#pragma once

// Support modules of cart_data: shared libraries this project builds around a third-party library
// whose dependencies must not meet the rest of the process (libcart_sentencepiece.so: its own
// protobuf; libcart_parquet.so: Apache Arrow and what it bundles). Each is opened with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so it binds to its own copies and nothing else sees them.
// Both sides are built by this project with the same compiler and standard library, so a C++
// interface across the boundary is safe.

#include <mutex>
#include <string>

namespace cart::data::internal {

struct ModuleSpec {
  const char* file_name;      // "libcart_parquet.so"
  const char* env;            // the variable that names another path ("CART_PARQUET_LIB")
  const char* compiled_path;  // where the build put it; may be null
  const char* entry;          // the exported function to return ("CartParquetLibrary")
  const char* what;           // for messages ("Parquet support")
};

// The module's entry point: the path in $env, then beside the executable, then ../lib from it,
// then compiled_path, the first that exists. Null with *error set (naming what was tried, or why
// the one found did not load).
void* LoadModuleEntry(const ModuleSpec& spec, std::string* error);

// The object the module's entry returns (`Api* entry()`), loaded once per process for each Api;
// null with *error set (the same error on every later call).
template <typename Api>
Api* LoadModule(const ModuleSpec& spec, std::string* error) {
  static Api* api = nullptr;
  static std::string load_error;
  static std::once_flag once;
  std::call_once(once, [&spec] {
    void* entry = LoadModuleEntry(spec, &load_error);
    if (entry != nullptr) api = reinterpret_cast<Api* (*)()>(entry)();
  });
  if (api == nullptr) *error = load_error;
  return api;
}

}  // namespace cart::data::internal
