#include "data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/corpus.h"
#include "data/internal/sentencepiece_shim.h"
#include "data/internal/tokenizers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::IsOk;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteTokenizerTest, BytesAreIdsAndBosEosFollow) {
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load("bytes"));
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->eos_id(), 257);
  EXPECT_EQ(tok->spec(), "bytes");
  EXPECT_THAT(tok->Encode("Hé"), ElementsAre(72, 0xC3, 0xA9));
  EXPECT_EQ(tok->Decode({256, 72, 0xC3, 0xA9, 257}), "Hé");
  EXPECT_EQ(tok->Decode({72, 999}), "H\xEF\xBF\xBD");
}

TEST(TokenizerLoadTest, UnknownSpecListsTheKinds) {
  EXPECT_THAT(Tokenizer::Load("llama"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("allowed: bytes, PATH.model (SentencePiece), gpt2:DIR")));
  EXPECT_THAT(Tokenizer::Load("/nonexistent/t.model"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/t.model")));
  EXPECT_THAT(Tokenizer::Load("gpt2:/nonexistent"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/encoder.json")));
  EXPECT_THAT(Tokenizer::Load("synth:x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("synth:<vocab size>")));
}

TEST(TokenizerLoadTest, GarbageModelFileIsInvalidArgumentNamingIt) {
  TempDir dir;
  WriteFile(dir.path() / "bad.model", "this is not a protobuf");
  EXPECT_THAT(Tokenizer::Load(dir.File("bad.model")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.model")));
}

TEST(SynthTokenizerTest, IdsRoundTripAsDecimalText) {
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load("synth:64"));
  EXPECT_EQ(tok->vocab_size(), 64);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->spec(), "synth:64");
  EXPECT_EQ(tok->Decode({1, 63, 0}), "1 63 0");
  EXPECT_THAT(tok->Encode("1 63 0"), ElementsAre(1, 63, 0));
}

// --- GPT-2 byte-level BPE on a hand-made vocabulary --------------------------------------------

// GPT-2's bytes_to_unicode(), written out from its definition: bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for themselves; the other 68 bytes map in order onto U+0100, U+0101, ...
std::string ByteChar(int b) {
  uint32_t cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    uint32_t n = 0;
    for (int o = 0; o < b; ++o) {
      if (!((o >= 0x21 && o <= 0x7E) || (o >= 0xA1 && o <= 0xAC) || (o >= 0xAE && o <= 0xFF))) {
        ++n;
      }
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte tokens get id = byte value; merges then get 256, 257, ... in file order.
void WriteTinyGpt2(const std::filesystem::path& dir) {
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[ByteChar(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {"Ġ", "w"},
      {"o", "r"}, {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}, {"e", "l"}};
  std::string bpe = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : merges) {
    bpe += a + " " + b + "\n";
    enc[a + b] = id++;
  }
  enc["<|endoftext|>"] = id;
  WriteFile(dir / "encoder.json", enc.dump());
  WriteFile(dir / "vocab.bpe", bpe);
}

TEST(Gpt2TokenizerTest, AppliesMergesByRankOnAHandMadeVocabulary) {
  TempDir dir;
  WriteTinyGpt2(dir.path());
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load("gpt2:" + dir.path().string()));
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->bos_id(), 266);
  EXPECT_EQ(tok->eos_id(), 266);
  // "hello" -> he, ll, hell, hello; " world" -> Ġw, or, Ġwor, ld, Ġworld.
  EXPECT_THAT(tok->Encode("hello world"), ElementsAre(259, 264));
  // "ell": the pair (l,l) has rank 1, (e,l) rank 9, so ll wins although (e,l) comes first.
  EXPECT_THAT(tok->Encode("ell"), ElementsAre('e', 257));
  // No merge applies across pre-tokens: "he" + " llo" stay apart; ' ' is the byte token 'Ġ'=32.
  EXPECT_THAT(tok->Encode("he llo"), ElementsAre(256, 32, 257, 'o'));
  EXPECT_THAT(tok->Encode("old"), ElementsAre('o', 263));
  // Multi-byte UTF-8 falls back to one token per byte.
  EXPECT_THAT(tok->Encode("é"), ElementsAre(0xC3, 0xA9));
  EXPECT_EQ(tok->Decode({266, 259, 264, 0xC3, 0xA9, 266}), "hello worldé");
  // Text that spells the special token is encoded as plain text.
  const std::vector<int64_t> eot_text = tok->Encode("<|endoftext|>");
  EXPECT_THAT(eot_text, ::testing::Not(::testing::Contains(266)));
  EXPECT_EQ(tok->Decode(eot_text), "<|endoftext|>");
}

TEST(Gpt2TokenizerTest, MalformedFilesNameFileAndLine) {
  TempDir dir;
  WriteTinyGpt2(dir.path());
  WriteFile(dir.path() / "vocab.bpe", "#version: 0.2\nh e\nq zz\n");
  EXPECT_THAT(Tokenizer::Load("gpt2:" + dir.path().string()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab.bpe:3: token \"zz\"")));
  WriteFile(dir.path() / "vocab.bpe", "#version: 0.2\nh e x\n");
  EXPECT_THAT(Tokenizer::Load("gpt2:" + dir.path().string()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab.bpe:2: expected")));
  WriteFile(dir.path() / "encoder.json", R"({"a": 0})");
  EXPECT_THAT(Tokenizer::Load("gpt2:" + dir.path().string()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all 256 byte tokens")));
}

std::vector<std::string> PreTokens(std::string_view text) {
  std::vector<std::string> out;
  internal::Gpt2PreTokenize(text, [&](size_t b, size_t n) { out.emplace_back(text.substr(b, n)); });
  return out;
}

TEST(Gpt2PreTokenizerTest, SplitsLikeTheGpt2Regex) {
  EXPECT_THAT(PreTokens("I'm  here\n\nok 123abc!! "),
              ElementsAre("I", "'m", " ", " here", "\n", "\n", "ok", " 123", "abc", "!!", " "));
  EXPECT_THAT(PreTokens("we'll they're 'sup"),
              ElementsAre("we", "'ll", " they", "'re", " '", "sup"));
  // Unicode letters and numbers (\p{L}, \p{N}); U+3000 is whitespace.
  EXPECT_THAT(PreTokens("Héllo 你好\u3000½x"), ElementsAre("Héllo", " 你好", "\u3000", "½", "x"));
  EXPECT_THAT(PreTokens(" !?"), ElementsAre(" !?"));
  EXPECT_THAT(PreTokens("a   "), ElementsAre("a", "   "));
}

// The real GPT-2 files, when deploy/fetch-corpora.sh has fetched them.
TEST(Gpt2TokenizerTest, RealGpt2FilesGiveKnownIds) {
  const std::string dir = std::string(CART_SOURCE_DIR) + "/var/corpora/gpt2";
  if (!std::filesystem::exists(dir + "/encoder.json")) {
    GTEST_SKIP() << "no GPT-2 files at " << dir << "; run deploy/fetch-corpora.sh to fetch them";
  }
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load("gpt2:" + dir));
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_THAT(tok->Encode("Hello world"), ElementsAre(15496, 995));
  const std::string text =
      "Fellow-Citizens of the Senate, it's 1790.\n\n  Héllo 你好 🤖 <tab>\t!";
  EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
}

// --- SentencePiece ---------------------------------------------------------------------------

std::string SmallCorpus() {
  std::string text;
  const char* words[] = {"the", "cat",  "sat",  "on",   "a",   "mat",  "and",   "dog", "ran",
                         "to",  "park", "with", "ball", "red", "blue", "small", "big", "happy"};
  uint64_t x = 12345;
  for (int line = 0; line < 3000; ++line) {
    for (int w = 0; w < 12; ++w) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      text += words[(x >> 33) % 18];
      text += w == 11 ? ".\n" : " ";
    }
  }
  return text;
}

TEST(SentencePieceTest, TrainsBpeModelThatLoadsAndRoundTrips) {
  TempDir dir;
  WriteFile(dir.path() / "corpus.txt", SmallCorpus());
  SentencePieceTrainOptions opts;
  opts.vocab = 350;
  opts.threads = 1;
  const std::string model = dir.File("tok.model");
  ASSERT_THAT(
      TrainSentencePiece({CorpusInput{dir.File("corpus.txt"), CorpusFormat::kLines}}, opts, model),
      IsOk());
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load(model));
  EXPECT_EQ(tok->vocab_size(), 350);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->spec(), std::filesystem::absolute(model).lexically_normal().string());
  // Learned merges make frequent words single pieces: far fewer ids than bytes.
  const std::string sentence = "the happy dog ran to the park with a red ball.";
  const std::vector<int64_t> ids = tok->Encode(sentence);
  EXPECT_LT(ids.size(), sentence.size() / 2);
  EXPECT_EQ(tok->Decode(ids), sentence);
  // Byte fallback: unseen characters and newlines survive the round trip exactly.
  const std::string odd = "Zebra ünïcode 🤖\n\ttabs  two spaces";
  EXPECT_EQ(tok->Decode(tok->Encode(odd)), odd);
}

// SentencePiece skips sentences over its length limit; a corpus of one very long line must still
// train (the line is cut at spaces before it reaches the trainer).
TEST(SentencePieceTest, TrainsOnDocumentsThatAreOneLongLine) {
  TempDir dir;
  std::string one_line = SmallCorpus();
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  ASSERT_GT(one_line.size(), 100000u);
  WriteFile(dir.path() / "long.txt", one_line);
  SentencePieceTrainOptions opts;
  opts.vocab = 350;
  opts.threads = 1;
  const std::string model = dir.File("long.model");
  ASSERT_THAT(
      TrainSentencePiece({CorpusInput{dir.File("long.txt"), CorpusFormat::kText}}, opts, model),
      IsOk());
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load(model));
  const std::string sentence = "the happy dog ran to the park with a red ball.";
  EXPECT_LT(tok->Encode(sentence).size(), sentence.size() / 2);
}

// Long text is encoded in segments when the model makes that exact; the ids must not change.
TEST(SentencePieceTest, SegmentedEncodingEqualsWholeTextEncoding) {
  TempDir dir;
  WriteFile(dir.path() / "corpus.txt", SmallCorpus());
  SentencePieceTrainOptions opts;
  opts.vocab = 350;
  opts.threads = 1;
  const std::string model = dir.File("seg.model");
  ASSERT_THAT(
      TrainSentencePiece({CorpusInput{dir.File("corpus.txt"), CorpusFormat::kLines}}, opts, model),
      IsOk());
  std::string error;
  std::unique_ptr<internal::SpModel> sp = internal::SpModel::Load(model, &error);
  ASSERT_NE(sp, nullptr) << error;
  EXPECT_TRUE(sp->segmented());
  // Runs of spaces, tabs, newlines, digits, unseen characters, leading and trailing spaces.
  std::string text = "  leading spaces ";
  const char* parts[] = {"the cat",      "   sat  on", "\ta mat\n\n",          "dog 12345 ran",
                         " ünï 🤖 ", "park.",      "with  a   red    ball"};
  for (int i = 0; text.size() < 20000; ++i) text += std::string(parts[i % 7]) + " ";
  text += "   ";
  const std::vector<int> whole = sp->EncodeWhole(text);
  EXPECT_EQ(sp->Encode(text), whole);
  EXPECT_GT(whole.size(), 1000u);
  const std::string real = std::string(CART_SOURCE_DIR) + "/var/corpora/sotu/sotu.txt";
  if (std::filesystem::exists(real)) {
    const std::string speech = ::cart::testing::ReadFile(real).substr(0, 200000);
    EXPECT_EQ(sp->Encode(speech), sp->EncodeWhole(speech));
  }
}

// Models whose pieces may span a cut, or whose normalizer rewrites text, are never segmented.
TEST(SentencePieceTest, ModelsWhereCuttingIsNotExactAreEncodedWhole) {
  const std::string corpus = SmallCorpus();
  TempDir dir;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"treat_whitespace_as_suffix", "true"},
                                                        {"normalization_rule_name", "nmt_nfkc"},
                                                        {"model_type", "unigram"}}) {
    std::unordered_map<std::string, std::string> flags = {{"model_type", "bpe"},
                                                          {"vocab_size", "60"},
                                                          {"normalization_rule_name", "identity"},
                                                          {"remove_extra_whitespaces", "false"},
                                                          {"minloglevel", "100"},
                                                          {"num_threads", "1"}};
    flags[flag] = value;
    size_t pos = 0;
    const std::function<bool(std::string*)> next = [&](std::string* line) {
      if (pos >= corpus.size()) return false;
      const size_t end = corpus.find('\n', pos);
      *line = corpus.substr(pos, end - pos);
      pos = end + 1;
      return true;
    };
    std::string proto, error;
    ASSERT_TRUE(internal::SpTrain(flags, next, &proto, &error)) << flag << ": " << error;
    WriteFile(dir.path() / "m.model", proto);
    std::unique_ptr<internal::SpModel> sp = internal::SpModel::Load(dir.File("m.model"), &error);
    ASSERT_NE(sp, nullptr) << error;
    EXPECT_FALSE(sp->segmented()) << flag << "=" << value;
  }
}

TEST(SentencePieceTest, TrainingErrorsAreReported) {
  TempDir dir;
  SentencePieceTrainOptions opts;
  EXPECT_THAT(TrainSentencePiece({CorpusInput{dir.File("missing.txt")}}, opts, dir.File("t.model")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.txt")));
  WriteFile(dir.path() / "c.txt", "tiny corpus\n");
  EXPECT_THAT(TrainSentencePiece({CorpusInput{dir.File("c.txt")}}, opts, dir.File("t.vocab")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(".model")));
  opts.vocab = 100;
  EXPECT_THAT(TrainSentencePiece({CorpusInput{dir.File("c.txt")}}, opts, dir.File("t.model")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(">= 260")));
  opts.vocab = 5000;  // far more pieces than a one-line corpus has
  EXPECT_THAT(TrainSentencePiece({CorpusInput{dir.File("c.txt")}}, opts, dir.File("t.model")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("SentencePiece")));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t.model"));
}

TEST(TokenizerThreadingTest, ConcurrentEncodesEqualSerialOnes) {
  TempDir dir;
  WriteTinyGpt2(dir.path());
  CART_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Load("gpt2:" + dir.path().string()));
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back(std::string(i, 'l') + " hello world old " + std::to_string(i));
  std::vector<std::vector<int64_t>> serial;
  for (const auto& t : texts) serial.push_back(tok->Encode(t));
  std::vector<std::vector<int64_t>> parallel(texts.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size(); i += 4) parallel[i] = tok->Encode(texts[i]);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(parallel, serial);
}

}  // namespace
}  // namespace cart::data
