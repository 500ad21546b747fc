#include "data/corpus.h"

#include <zlib.h>

#include <filesystem>
#include <vector>

#include "data/internal/parquet_reader.h"
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

// Whole documents (pieces joined), or the reader's error.
absl::StatusOr<std::vector<std::string>> ReadDocs(const CorpusInput& in,
                                                  std::vector<int64_t>* lines = nullptr) {
  auto reader = DocumentReader::Open(in);
  if (!reader.ok()) return reader.status();
  std::vector<std::string> docs;
  DocumentPiece p;
  bool open = false;
  while (true) {
    absl::StatusOr<bool> got = (*reader)->Next(&p);
    if (!got.ok()) return got.status();
    if (!*got) break;
    if (p.first != !open) return absl::InternalError("first flag out of order");
    if (p.first) {
      docs.emplace_back();
      if (lines) lines->push_back(p.line);
    }
    docs.back() += p.text;
    open = !p.last;
  }
  if (open) return absl::InternalError("last document not closed");
  return docs;
}

void WriteGzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
            static_cast<int>(data.size()));
  gzclose(f);
}

TEST(CorpusTest, TinyStoriesSplitsOnEndOfTextAndTrimsBlankLines) {
  TempDir dir;
  WriteFile(dir.path() / "t.txt",
            "Once upon a time.\nThe end.\n<|endoftext|>\n\nSecond story.\n<|endoftext|>\n"
            "<|endoftext|>\nThird.<|endoftext|>Fourth\n");
  std::vector<int64_t> lines;
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("t.txt")}, &lines));
  EXPECT_THAT(docs,
              ElementsAre("Once upon a time.\nThe end.", "Second story.", "Third.", "Fourth"));
  EXPECT_THAT(lines, ElementsAre(1, 5, 8, 8));
  CART_ASSERT_OK_AND_ASSIGN(CorpusFormat f, DetectCorpusFormat(dir.File("t.txt")));
  EXPECT_EQ(f, CorpusFormat::kTinyStories);
}

TEST(CorpusTest, JsonLinesReadsTheTextFieldAndSkipsBlankLines) {
  TempDir dir;
  WriteFile(
      dir.path() / "d.jsonl",
      "{\"text\": \"first \\u00e9\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"second\\nline\"}\r\n");
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("d.jsonl")}));
  EXPECT_THAT(docs, ElementsAre("first é", "second\nline"));
  WriteFile(dir.path() / "e.data", "{\"body\": \"x\"}\n{\"body\": \"y\"}\n");
  CART_ASSERT_OK_AND_ASSIGN(CorpusFormat f, DetectCorpusFormat(dir.File("e.data")));
  EXPECT_EQ(f, CorpusFormat::kJsonl);
  CART_ASSERT_OK_AND_ASSIGN(auto body, ReadDocs({dir.File("e.data"), CorpusFormat::kAuto, "body"}));
  EXPECT_THAT(body, ElementsAre("x", "y"));
}

TEST(CorpusTest, JsonLinesErrorsNameFileLineAndProblem) {
  TempDir dir;
  WriteFile(dir.path() / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  EXPECT_THAT(ReadDocs({dir.File("bad.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.jsonl:2: invalid JSON")));
  WriteFile(dir.path() / "nofield.jsonl", "{\"text\": \"ok\"}\n\n{\"content\": \"x\"}\n");
  EXPECT_THAT(ReadDocs({dir.File("nofield.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nofield.jsonl:3: no \"text\" field")));
  WriteFile(dir.path() / "num.jsonl", "{\"text\": 5}\n");
  EXPECT_THAT(ReadDocs({dir.File("num.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num.jsonl:1: field \"text\" is a number; expected a string")));
  WriteFile(dir.path() / "arr.jsonl", "[1, 2]\n");
  EXPECT_THAT(ReadDocs({dir.File("arr.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("arr.jsonl:1: expected a JSON object")));
}

TEST(CorpusTest, GzipIsReadWhateverTheName) {
  TempDir dir;
  WriteGzip(dir.File("d.jsonl.gz"), "{\"text\": \"zipped one\"}\n{\"text\": \"zipped two\"}\n");
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("d.jsonl.gz")}));
  EXPECT_THAT(docs, ElementsAre("zipped one", "zipped two"));
  WriteGzip(dir.File("stories"), "A.\n<|endoftext|>\nB.\n");
  CART_ASSERT_OK_AND_ASSIGN(auto stories, ReadDocs({dir.File("stories")}));
  EXPECT_THAT(stories, ElementsAre("A.", "B."));
}

TEST(CorpusTest, TruncatedGzipIsDataLoss) {
  TempDir dir;
  std::string big;
  for (int i = 0; i < 20000; ++i) big += "{\"text\": \"line " + std::to_string(i * 7919) + "\"}\n";
  WriteGzip(dir.File("full.jsonl.gz"), big);
  const std::string bytes = ::cart::testing::ReadFile(dir.path() / "full.jsonl.gz");
  WriteFile(dir.path() / "cut.jsonl.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(ReadDocs({dir.File("cut.jsonl.gz")}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.jsonl.gz")));
}

TEST(CorpusTest, PlainTextIsOneDocumentPerFileKeptExactly) {
  TempDir dir;
  WriteFile(dir.path() / "p.txt", "Line one.\n\nLine two, no newline at end");
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("p.txt")}));
  EXPECT_THAT(docs, ElementsAre("Line one.\n\nLine two, no newline at end"));
  WriteFile(dir.path() / "empty.txt", "");
  CART_ASSERT_OK_AND_ASSIGN(auto none, ReadDocs({dir.File("empty.txt")}));
  EXPECT_TRUE(none.empty());
}

TEST(CorpusTest, LinesFormatMakesADocumentOfEachNonBlankLine) {
  TempDir dir;
  WriteFile(dir.path() / "l.txt", "alpha\r\n\n  \nbeta\ngamma");
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("l.txt"), CorpusFormat::kLines}));
  EXPECT_THAT(docs, ElementsAre("alpha", "beta", "gamma"));
}

TEST(CorpusTest, HugeDocumentsStreamInBoundedPiecesAndReassembleExactly) {
  TempDir dir;
  std::string big;
  for (int i = 0; big.size() < 3 * DocumentReader::kMaxPieceBytes; ++i) {
    big += "line " + std::to_string(i) + " of a long document\n";
  }
  WriteFile(dir.path() / "big.txt", big);
  WriteFile(dir.path() / "big.stories", "<|endoftext|>\n" + big + "<|endoftext|>\nshort\n");
  for (const std::string name : {"big.txt", "big.stories"}) {
    auto reader = DocumentReader::Open({dir.File(name)});
    ASSERT_THAT(reader, IsOk());
    DocumentPiece p;
    int pieces = 0;
    size_t largest = 0;
    while (true) {
      absl::StatusOr<bool> got = (*reader)->Next(&p);
      ASSERT_THAT(got, IsOk());
      if (!*got) break;
      ++pieces;
      largest = std::max(largest, p.text.size());
    }
    EXPECT_GE(pieces, 3) << name;
    EXPECT_LE(largest, 2 * DocumentReader::kMaxPieceBytes) << name;
  }
  CART_ASSERT_OK_AND_ASSIGN(auto docs, ReadDocs({dir.File("big.txt")}));
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], big);
  CART_ASSERT_OK_AND_ASSIGN(auto stories, ReadDocs({dir.File("big.stories")}));
  ASSERT_EQ(stories.size(), 2u);
  EXPECT_EQ(stories[0] + "\n", big);
  EXPECT_EQ(stories[1], "short");
}

// A build with Arrow reads Parquet (tests/data/parquet_test.py reads real shards) and names what
// is wrong with a file that only starts like one; a build without says how to convert it.
TEST(CorpusTest, ABrokenParquetFileIsNamedAndABuildWithoutArrowSaysHowToConvert) {
  TempDir dir;
  WriteFile(dir.path() / "x.parquet", "PAR1....");
  WriteFile(dir.path() / "renamed.dat", "PAR1....");
  CART_ASSERT_OK_AND_ASSIGN(CorpusFormat detected, DetectCorpusFormat(dir.File("renamed.dat")));
  EXPECT_EQ(detected, CorpusFormat::kParquet);
  std::string version;
  if (internal::ParquetAvailable(&version)) {
    EXPECT_THAT(version, HasSubstr("Apache Arrow"));
    EXPECT_THAT(DocumentReader::Open({dir.File("x.parquet")}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("x.parquet"),
                                          HasSubstr("not a Parquet file, or truncated"))));
    EXPECT_THAT(DocumentReader::Open({dir.File("renamed.dat")}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("renamed.dat")));
  } else {
    EXPECT_THAT(DocumentReader::Open({dir.File("x.parquet")}),
                StatusIs(absl::StatusCode::kUnimplemented,
                         ::testing::AllOf(HasSubstr("x.parquet"), HasSubstr("CART_WITH_PARQUET"),
                                          HasSubstr("pyarrow"), HasSubstr(".jsonl"))));
  }
  EXPECT_THAT(DocumentReader::Open({dir.File("missing.parquet")}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.parquet")));
  // A directory stands for the Parquet shards under it, in path order; one without any is named.
  std::filesystem::create_directories(dir.path() / "hf" / "data");
  WriteFile(dir.path() / "hf" / "data" / "train-00001-of-00002.parquet", "PAR1");
  WriteFile(dir.path() / "hf" / "data" / "train-00000-of-00002.parquet", "PAR1");
  WriteFile(dir.path() / "hf" / "README.md", "not a shard");
  CART_ASSERT_OK_AND_ASSIGN(auto expanded, ExpandCorpusInputs({{dir.File("hf")}}));
  ASSERT_EQ(expanded.size(), 2u);
  EXPECT_THAT(expanded[0].path, HasSubstr("train-00000-of-00002.parquet"));
  EXPECT_THAT(expanded[1].path, HasSubstr("train-00001-of-00002.parquet"));
  std::filesystem::create_directories(dir.path() / "empty");
  EXPECT_THAT(ExpandCorpusInputs({{dir.File("empty")}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("empty"), HasSubstr("no .parquet file"))));
}

TEST(CorpusTest, FormatNamesParseAndUnknownOnesListTheAllowed) {
  for (CorpusFormat f :
       {CorpusFormat::kAuto, CorpusFormat::kText, CorpusFormat::kLines, CorpusFormat::kTinyStories,
        CorpusFormat::kJsonl, CorpusFormat::kParquet}) {
    CART_ASSERT_OK_AND_ASSIGN(CorpusFormat back, ParseCorpusFormat(CorpusFormatName(f)));
    EXPECT_EQ(back, f);
  }
  EXPECT_THAT(ParseCorpusFormat("csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("allowed: auto, text, lines, tinystories, jsonl")));
  EXPECT_THAT(DocumentReader::Open({"/nonexistent/x.txt"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/x.txt")));
}

}  // namespace
}  // namespace cart::data
