#pragma once

// Tokenizers: text <-> token ids. Four kinds, each named by a spec string that is stored in
// token file metadata (TokenFileInfo::tokenizer) so that the tokenizer can be loaded again:
//   "bytes"          UTF-8 bytes as ids 0..255, BOS 256, EOS 257 (vocab 258)
//   "<path>.model"   a SentencePiece model (e.g. the Llama-2 tokenizer.model), via libsentencepiece
//   "gpt2:<dir>"     GPT-2 byte-level BPE from <dir>/encoder.json and <dir>/vocab.bpe
//   "synth:<vocab>"  ids of a synthetic source (cart data synth): text is the ids in decimal,
//                    separated by spaces; no BOS/EOS

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::data {

// All methods are const and thread-safe: one tokenizer may encode from many threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, without BOS/EOS. Never produces a special id (BOS, EOS, GPT-2's
  // <|endoftext|>) from text that spells one.
  virtual std::vector<int64_t> Encode(std::string_view text) const = 0;
  // The text of `ids`. BOS/EOS decode to nothing; ids outside [0, vocab) decode as U+FFFD.
  virtual std::string Decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // -1 if none
  virtual int64_t eos_id() const = 0;  // -1 if none
  // The spec string Load() accepts to build this tokenizer again (paths made absolute).
  virtual std::string spec() const = 0;

  // Builds a tokenizer from its spec (see the top of this file). InvalidArgument for a spec of
  // no known kind (the message lists them); NotFound when a file is missing; InvalidArgument
  // naming the file (and line, for vocab.bpe) when it is malformed.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& spec);
};

// Options for training a SentencePiece BPE model. The defaults follow the Llama-2 tokenizer's
// trainer settings, so that text round-trips exactly: identity normalization, no whitespace
// folding, byte fallback for anything outside the learned pieces, digits split.
struct SentencePieceTrainOptions {
  // Pieces in the model, including <unk>=0, <s>=1 (BOS), </s>=2 (EOS) and the 256 byte pieces.
  // Must exceed 259 + the distinct characters kept; SentencePiece reports when it is too small
  // or too large for the corpus.
  int64_t vocab = 8000;
  // Fraction of the corpus's characters the character set covers; the rest fall back to bytes.
  double character_coverage = 0.9995;
  // At most this many lines (sampled by SentencePiece) go into training; 0 means all. Bounds
  // the trainer's memory on a large corpus.
  int64_t max_sentences = 2'000'000;
  // Trainer threads; 0 means the machine's hardware threads.
  int threads = 0;
};

struct CorpusInput;  // data/corpus.h

// Trains a SentencePiece BPE model on the documents of `inputs` (each document's lines are the
// training sentences) and writes it to `model_path` (which must end in ".model") atomically.
// Errors name the input file and line, or carry SentencePiece's message.
absl::Status TrainSentencePiece(const std::vector<CorpusInput>& inputs,
                                const SentencePieceTrainOptions& options,
                                const std::string& model_path);

}  // namespace cart::data
