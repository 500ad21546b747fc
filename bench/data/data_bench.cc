// bench-data: tokenization throughput of each tokenizer, single-threaded Encode and the full
// `cart data prepare` pipeline at 1 and N threads (MB/s of input text, tokens/s).
//
//   bench-data [CORPUS] [--threads N]
//
// CORPUS defaults to var/corpora/sotu/sotu.txt (deploy/fetch-corpora.sh), else generated text.
// The GPT-2 tokenizer is measured when var/corpora/gpt2 exists. A SentencePiece BPE model
// (vocab 8000) is trained on the corpus first; its training time is printed too.

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string GeneratedText(size_t bytes) {
  const char* words[] = {"the",   "state",  "of",       "union", "is",      "strong", "and",
                         "our",   "people", "congress", "shall", "nation",  "year",   "great",
                         "peace", "war",    "economy",  "law",   "freedom", "1790",   "2024"};
  std::string text;
  uint64_t x = 88172645463325252ull;
  while (text.size() < bytes) {
    for (int w = 0; w < 15; ++w) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      text += words[x % 21];
      text += w == 14 ? ".\n" : " ";
    }
    if (x % 7 == 0) text += "<|endoftext|>\n";
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus = std::string(CART_SOURCE_DIR) + "/var/corpora/sotu/sotu.txt";
  int threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      corpus = a;
    }
  }
  const std::string tmp =
      (std::filesystem::temp_directory_path() / ("bench-data-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(tmp);
  if (!std::filesystem::exists(corpus)) {
    corpus = tmp + "/generated.txt";
    std::ofstream(corpus) << GeneratedText(8 << 20);
    fmt::print("corpus: generated text, 8 MiB (run deploy/fetch-corpora.sh for real text)\n");
  } else {
    fmt::print("corpus: {} ({:.1f} MB)\n", corpus, std::filesystem::file_size(corpus) / 1e6);
  }
  std::ifstream in(corpus, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const double mb = text.size() / 1e6;

  std::vector<std::string> specs = {"bytes"};
  const std::string model = tmp + "/bench.model";
  cart::data::SentencePieceTrainOptions sp;
  sp.vocab = 8000;
  sp.max_sentences = 200000;
  auto start = Clock::now();
  absl::Status st = cart::data::TrainSentencePiece({{corpus}}, sp, model);
  if (st.ok()) {
    fmt::print("sentencepiece: trained BPE vocab {} in {:.1f} s\n", sp.vocab, Seconds(start));
    specs.push_back(model);
  } else {
    fmt::print("sentencepiece: training failed: {}\n", cart::Message(st));
  }
  const std::string gpt2 = std::string(CART_SOURCE_DIR) + "/var/corpora/gpt2";
  if (std::filesystem::exists(gpt2 + "/encoder.json")) specs.push_back("gpt2:" + gpt2);

  fmt::print("\n{:<14} {:>20} {:>20} {:>20}\n", "tokenizer", "Encode, 1 thread",
             "prepare, 1 thread", fmt::format("prepare, {} threads", threads));
  for (const std::string& spec : specs) {
    auto tok = cart::data::Tokenizer::Load(spec);
    if (!tok.ok()) {
      fmt::print("{}: {}\n", spec, cart::Message(tok.status()));
      continue;
    }
    // Encode in 64 KiB slices, as one thread would without the pipeline.
    start = Clock::now();
    int64_t tokens = 0;
    for (size_t pos = 0; pos < text.size(); pos += 65536) {
      tokens +=
          static_cast<int64_t>((*tok)->Encode(std::string_view(text).substr(pos, 65536)).size());
    }
    const double encode_s = Seconds(start);
    std::vector<std::string> cells = {
        fmt::format("{:.1f} MB/s {:.2f}M tok/s", mb / encode_s, tokens / encode_s / 1e6)};
    for (int t : {1, threads}) {
      cart::data::PrepareOptions o;
      o.inputs = {{corpus}};
      o.tokenizer = spec;
      o.out = tmp + "/out.bin";
      o.threads = t;
      start = Clock::now();
      auto r = cart::data::Prepare(o);
      const double s = Seconds(start);
      if (!r.ok()) {
        cells.push_back("error: " + cart::Message(r.status()));
        continue;
      }
      cells.push_back(
          fmt::format("{:.1f} MB/s {:.2f}M tok/s", mb / s, r->train.info.tokens / s / 1e6));
    }
    const std::string name = spec == model ? "sentencepiece" : spec.substr(0, spec.find(':'));
    fmt::print("{:<14} {:>20} {:>20} {:>20}\n", name, cells[0], cells[1], cells[2]);
  }
  std::filesystem::remove_all(tmp);
  return 0;
}
