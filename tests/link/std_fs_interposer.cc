// A shared library that does what PyTorch's wheels do (PyTorch issue 133437): it exports its own
// definition of a libstdc++ function, std::filesystem::remove_all(const path&, error_code&).
// This one removes nothing and counts its calls, so that link_order_test can tell whose
// remove_all a program linked against it (before libstdc++, as a program names libtorch) runs.
#include <cstdint>
#include <filesystem>
#include <system_error>

extern "C" {
// Calls of the copy below; read by link_order_test.
__attribute__((visibility("default"))) int cart_interposer_calls = 0;
}

namespace std::filesystem {

__attribute__((visibility("default"))) std::uintmax_t remove_all(const path&, std::error_code& ec) {
  ++cart_interposer_calls;
  ec.clear();
  return 0;
}

}  // namespace std::filesystem
