#pragma once

// Parquet corpora (the Hugging Face layout of Wikipedia and FineWeb-Edu: shards with a `text`
// column) as a DocumentReader: each non-null, non-empty row of the text column is one document,
// read 128 rows at a time through libcart_parquet.so (parquet_api.h).

#include <memory>

#include "absl/status/statusor.h"
#include "data/corpus.h"

namespace cart::data::internal {

// Unimplemented, naming the path and saying how to convert, when this build has no Parquet
// module; InvalidArgument "PATH: problem" for a file Arrow cannot read (not Parquet, truncated),
// a missing column (the columns there are named) or a column that is not text; NotFound for a
// missing file.
absl::StatusOr<std::unique_ptr<DocumentReader>> OpenParquetReader(const CorpusInput& input);

// Whether this build reads Parquet; *version gets the Arrow version, or why not.
bool ParquetAvailable(std::string* version);

}  // namespace cart::data::internal
