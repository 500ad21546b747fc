#include "hf/python_sources.h"

namespace cart::hf {

std::map<std::string, std::string> EmbeddedPythonSources();  // generated (embed_python.cmake)

const std::map<std::string, std::string>& PythonSources() {
  static const auto* sources = new std::map<std::string, std::string>(EmbeddedPythonSources());
  return *sources;
}

const std::string& PythonSource(const std::string& name) {
  static const std::string* none = new std::string();
  auto it = PythonSources().find(name);
  return it == PythonSources().end() ? *none : it->second;
}

}  // namespace cart::hf
