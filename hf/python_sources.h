#pragma once

// The Python files of hf/python/, embedded in the program at build time (hf/CMakeLists.txt), so
// that an installed `cart` or `cart-worker` writes them without a source tree: the model code
// an exported directory carries (configuration_cart.py, modeling_cart.py, tokenization_cart.py)
// and the harness runner of the worker's lm-eval jobs (cart_harness.py).

#include <map>
#include <string>

namespace cart::hf {

// File name -> contents. Never empty; the same map for the life of the program.
const std::map<std::string, std::string>& PythonSources();

// The contents of one of them; the empty string for a name that is not one.
const std::string& PythonSource(const std::string& name);

}  // namespace cart::hf
