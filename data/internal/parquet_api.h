#pragma once

// The interface between cart_data and libcart_parquet.so, the module that wraps Apache Arrow's
// Parquet reader (loaded as module_loader.h describes, so that Arrow and the libraries it bundles
// stay its own). Built only when CMake finds Arrow (CART_WITH_PARQUET; docs/model.md §6).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cart::data::internal {

// One Parquet file's string column, read batch by batch: at most one batch of rows in memory.
class ParquetColumnApi {
 public:
  virtual ~ParquetColumnApi() = default;
  // Appends the next batch of rows (at most `max_rows`) to *texts, one string per row, and sets
  // *nulls to how many null rows the batch had (skipped). Returns false at the end, or on an
  // error, with *error set ("row group 3: ..." from Arrow; the caller adds the path).
  virtual bool Next(int64_t max_rows, std::vector<std::string>* texts, int64_t* nulls,
                    std::string* error) = 0;
  virtual int64_t rows() const = 0;         // rows in the file
  virtual int row_groups() const = 0;       // row groups in the file
  virtual uint64_t bytes_read() const = 0;  // compressed bytes of the row groups begun so far
};

class ParquetLibraryApi {
 public:
  virtual ~ParquetLibraryApi() = default;
  // Opens `path` to read its top-level string column `column`. Null with *error set: not a
  // Parquet file or truncated (Arrow's words), no such column (the columns there are named), a
  // column that is not text (its type named).
  virtual std::unique_ptr<ParquetColumnApi> Open(const std::string& path, const std::string& column,
                                                 std::string* error) = 0;
  virtual std::string arrow_version() const = 0;  // "25.0.1"
};

}  // namespace cart::data::internal

// Exported by libcart_parquet.so; returns a process-lifetime singleton.
extern "C" cart::data::internal::ParquetLibraryApi* CartParquetLibrary();
