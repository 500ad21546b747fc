#pragma once

// What a data file is, for data lineage (docs/architecture.md "Runs are bound to their data by
// content"): the one struct the client that submits, the worker that opens the file, cartd and
// the store all pass around. How it is computed is data/identity.h; its wire form is
// proto/data_identity.h.

#include <cstdint>
#include <string>

namespace cart::data {

struct FileIdentity {
  std::string sha256;  // of the file's bytes, 64 lowercase hex digits
  int64_t size_bytes = 0;
  int64_t tokens = -1;           // token files: the token count; -1 for any other file (task sets)
  std::string tokenizer;         // token files: the tokenizer spec their metadata names
  std::string tokenizer_sha256;  // of the tokenizer's own files; empty when they cannot be read
};

}  // namespace cart::data
