#pragma once

// The concrete tokenizers behind Tokenizer::Load (data/tokenizer.h).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"

namespace cart::data::internal {

std::unique_ptr<Tokenizer> NewByteTokenizer();
// InvalidArgument unless 1 <= vocab <= 2^31.
absl::StatusOr<std::unique_ptr<Tokenizer>> NewSynthTokenizer(int64_t vocab);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);
// `dir` holds encoder.json and vocab.bpe.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Tokenizer(const std::string& dir);

// GPT-2's pre-tokenizer: splits text as the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does, calling emit(begin, length) for each match in order. Exposed for tests.
template <typename Emit>
void Gpt2PreTokenize(std::string_view text, Emit emit);

}  // namespace cart::data::internal

#include "data/internal/gpt2_pretokenize_inl.h"
