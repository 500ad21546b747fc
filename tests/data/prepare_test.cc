#include "data/prepare.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "common/strings.h"
#include "data/tokenizer.h"
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

std::vector<int64_t> AllTokens(const std::string& path) {
  auto f = TokenFile::Open(path);
  EXPECT_THAT(f, IsOk());
  if (!f.ok()) return {};
  std::vector<int64_t> ids(f->size());
  EXPECT_THAT(f->Read(0, f->size(), ids.data()), IsOk());
  return ids;
}

// Splits a bytes-tokenizer stream into documents, checking BOS/EOS framing.
std::vector<std::string> Documents(const std::vector<int64_t>& ids) {
  std::vector<std::string> docs;
  bool open = false;
  for (int64_t id : ids) {
    if (id == 256) {
      EXPECT_FALSE(open) << "BOS inside a document";
      docs.emplace_back();
      open = true;
    } else if (id == 257) {
      EXPECT_TRUE(open) << "EOS outside a document";
      open = false;
    } else {
      EXPECT_TRUE(open) << "token outside a document";
      if (open) docs.back() += static_cast<char>(id);
    }
  }
  EXPECT_FALSE(open) << "unterminated document";
  return docs;
}

std::string Stories(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "Story number " + std::to_string(i) + ".\n<|endoftext|>\n";
  return s;
}

TEST(PrepareTest, WritesBosIdsEosPerDocumentAcrossInputsInOrder) {
  TempDir dir;
  WriteFile(dir.path() / "a.txt", "A one.\n<|endoftext|>\nA two.\n");
  WriteFile(dir.path() / "b.jsonl", "{\"text\": \"B one\"}\n");
  PrepareOptions o;
  o.inputs = {{dir.File("a.txt")}, {dir.File("b.jsonl")}};
  o.out = dir.File("out.bin");
  CART_ASSERT_OK_AND_ASSIGN(PrepareResult r, Prepare(o));
  EXPECT_EQ(r.train.documents, 3);
  const std::vector<int64_t> ids = AllTokens(o.out);
  EXPECT_EQ(ids.front(), 256);
  EXPECT_EQ(ids.back(), 257);
  EXPECT_THAT(Documents(ids), ElementsAre("A one.", "A two.", "B one"));
  EXPECT_EQ(r.train.info.tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(r.train.info.tokenizer, "bytes");
  EXPECT_EQ(r.train.info.bos_id, 256);
  EXPECT_THAT(r.train.info.sources,
              ElementsAre(HasSubstr("a.txt (tinystories)"), HasSubstr("b.jsonl (jsonl)")));
}

TEST(PrepareTest, OutputDoesNotDependOnThreadsOrBatchSize) {
  TempDir dir;
  WriteFile(dir.path() / "s.txt", Stories(3000));
  std::string sha;
  for (int threads : {1, 2, 4}) {
    for (size_t batch : {size_t{64}, size_t{4} << 20}) {
      PrepareOptions o;
      o.inputs = {{dir.File("s.txt")}};
      o.out = dir.File("o.bin");
      o.holdouts = {Holdout{"v", 0.1, 0}};
      o.threads = threads;
      o.batch_bytes = batch;
      CART_ASSERT_OK_AND_ASSIGN(PrepareResult r, Prepare(o));
      const std::string combined = r.train.info.sha256 + r.holdouts[0].info.sha256;
      if (sha.empty()) sha = combined;
      EXPECT_EQ(combined, sha) << threads << " threads, batch " << batch;
    }
  }
}

TEST(PrepareTest, HoldoutsTakeCountsFromTheStartAndFractionsByHash) {
  TempDir dir;
  WriteFile(dir.path() / "s.txt", Stories(4000));
  PrepareOptions o;
  o.inputs = {{dir.File("s.txt")}};
  o.out = dir.File("train.bin");
  o.holdouts = {Holdout{"first", 0, 10}, Holdout{"val", 0.05, 0}};
  o.seed = 7;
  int64_t progress_calls = 0;
  PrepareProgress last;
  o.progress = [&](const PrepareProgress& p) {
    ++progress_calls;
    last = p;
  };
  CART_ASSERT_OK_AND_ASSIGN(PrepareResult r, Prepare(o));
  ASSERT_EQ(r.holdouts.size(), 2u);
  EXPECT_EQ(r.holdouts[0].path, dir.File("first.bin"));
  EXPECT_EQ(r.holdouts[0].documents, 10);
  const auto first = Documents(AllTokens(dir.File("first.bin")));
  ASSERT_EQ(first.size(), 10u);
  EXPECT_EQ(first[0], "Story number 0.");
  EXPECT_EQ(first[9], "Story number 9.");
  // 5% of the remaining 3990, within 4 standard deviations (sd ≈ 13.8).
  EXPECT_NEAR(r.holdouts[1].documents, 0.05 * 3990, 56);
  EXPECT_EQ(r.train.documents + r.holdouts[0].documents + r.holdouts[1].documents, 4000);
  // Every document lands in exactly one file.
  std::map<std::string, int> seen;
  for (const std::string f : {"train.bin", "first.bin", "val.bin"}) {
    for (const std::string& d : Documents(AllTokens(dir.File(f)))) ++seen[d];
  }
  EXPECT_EQ(seen.size(), 4000u);
  for (const auto& [doc, n] : seen) EXPECT_EQ(n, 1) << doc;
  EXPECT_GE(progress_calls, 1);
  EXPECT_EQ(last.documents, 4000);
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  EXPECT_EQ(last.tokens,
            r.train.info.tokens + r.holdouts[0].info.tokens + r.holdouts[1].info.tokens);
  // Another seed picks other documents.
  o.seed = 8;
  o.progress = nullptr;
  CART_ASSERT_OK_AND_ASSIGN(PrepareResult r8, Prepare(o));
  EXPECT_NE(r8.holdouts[1].info.sha256, r.holdouts[1].info.sha256);
}

TEST(PrepareTest, HoldoutSpecsParseAndBadOnesSayWhatIsAllowed) {
  CART_ASSERT_OK_AND_ASSIGN(Holdout f, ParseHoldout("tiny_val=0.01"));
  EXPECT_EQ(f.name, "tiny_val");
  EXPECT_DOUBLE_EQ(f.fraction, 0.01);
  EXPECT_EQ(f.documents, 0);
  CART_ASSERT_OK_AND_ASSIGN(Holdout c, ParseHoldout("val=500"));
  EXPECT_EQ(c.documents, 500);
  for (const char* bad : {"val", "val=1.5", "val=0", "val=-3", "a/b=0.1", "val=x"}) {
    EXPECT_THAT(ParseHoldout(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NAME=FRACTION")))
        << bad;
  }
}

TEST(PrepareTest, EmptyHoldoutAndMissingInputAndBadJsonAreErrors) {
  TempDir dir;
  WriteFile(dir.path() / "s.txt", Stories(3));
  PrepareOptions o;
  o.inputs = {{dir.File("s.txt")}};
  o.out = dir.File("o.bin");
  o.holdouts = {Holdout{"v", 0.0001, 0}};
  EXPECT_THAT(Prepare(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("holdout v received no document")));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "o.bin"));
  o.holdouts = {Holdout{"v", 0, 3}};
  EXPECT_THAT(Prepare(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none is left")));
  o.holdouts.clear();
  o.inputs = {{dir.File("nope.txt")}};
  EXPECT_THAT(Prepare(o), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.txt")));
  WriteFile(dir.path() / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"text\" 1}\n");
  o.inputs = {{dir.File("bad.jsonl")}};
  EXPECT_THAT(Prepare(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.jsonl:3:")));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "o.bin"));
  o.inputs = {{dir.File("s.txt")}};
  o.tokenizer = "nonsense";
  EXPECT_THAT(Prepare(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown tokenizer")));
}

// --- mixture ---------------------------------------------------------------------------------

void WriteConstant(const std::string& path, int64_t value, int64_t n, int64_t vocab = 10) {
  TokenFileInfo meta;
  meta.tokenizer = "synth:" + std::to_string(vocab);
  meta.vocab = vocab;
  auto w = TokenFileWriter::Create(path, meta);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT(w->Append(std::vector<int64_t>(n, value)), IsOk());
  ASSERT_THAT(w->Finish(), IsOk());
}

TEST(MixtureTest, InterleavesChunksLikeThePaper) {
  TempDir dir;
  WriteConstant(dir.File("t.bin"), 1, 1000);
  WriteConstant(dir.File("w.bin"), 2, 1000);
  WriteConstant(dir.File("f.bin"), 3, 1000);
  CART_ASSERT_OK_AND_ASSIGN(
      auto sources, ParseMixSpec(StrCat("tiny=", dir.File("t.bin"), ":30,wiki=", dir.File("w.bin"),
                                        ":30,edu=", dir.File("f.bin"), ":40")));
  MixOptions o{sources, 4, dir.File("mix.bin"), 0};
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo info, BuildMixture(o));
  const std::vector<int64_t> ids = AllTokens(dir.File("mix.bin"));
  // Weights 30/30/40 reduce to 3/3/4: chunks [t,t,t,w,w,w,f,f,f,f] of 4 tokens each.
  std::vector<int64_t> cycle;
  for (int64_t s : {1, 1, 1, 2, 2, 2, 3, 3, 3, 3}) cycle.insert(cycle.end(), 4, s);
  ASSERT_GE(ids.size(), cycle.size());
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 40), cycle);
  // edu (1000 tokens, 16 per cycle) runs out first: 62 whole cycles.
  EXPECT_EQ(info.tokens, 62 * 40);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 3), 62 * 16);
  EXPECT_THAT(info.sources, ::testing::Contains(HasSubstr("tiny=")));
  // A token limit cuts the last chunk short.
  o.max_tokens = 10;
  o.out = dir.File("mix10.bin");
  ASSERT_THAT(BuildMixture(o), IsOk());
  EXPECT_THAT(AllTokens(o.out), ElementsAre(1, 1, 1, 1, 1, 1, 1, 1, 1, 1));
}

TEST(MixtureTest, SourcesMustShareTheTokenizer) {
  TempDir dir;
  WriteConstant(dir.File("a.bin"), 1, 100, 10);
  WriteConstant(dir.File("b.bin"), 1, 100, 20);
  MixOptions o{{{"a", dir.File("a.bin"), 1}, {"b", dir.File("b.bin"), 1}}, 4, dir.File("m.bin"), 0};
  EXPECT_THAT(BuildMixture(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                        ::testing::AllOf(HasSubstr("a.bin"), HasSubstr("b.bin"))));
  EXPECT_THAT(ParseMixSpec("a=x.bin:0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("WEIGHT")));
  EXPECT_THAT(ParseMixSpec("x.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NAME=")));
  EXPECT_THAT(ParseMixSpec("a=x.bin,a=y.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  CART_ASSERT_OK_AND_ASSIGN(auto one, ParseMixSpec("a=x.bin"));
  EXPECT_EQ(one[0].weight, 1);
  o.sources = {{"a", dir.File("missing.bin"), 1}};
  EXPECT_THAT(BuildMixture(o), StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

}  // namespace
}  // namespace cart::data

namespace cart::data {
namespace {

TEST(PrepareTest, AMaxTokensCapKeepsExactlyThePrefixWhateverTheThreads) {
  TempDir dir;
  WriteFile(dir.path() / "s.txt", Stories(3000));
  PrepareOptions all;
  all.inputs = {{dir.File("s.txt")}};
  all.out = dir.File("all.bin");
  CART_ASSERT_OK_AND_ASSIGN(PrepareResult whole, Prepare(all));
  EXPECT_FALSE(whole.capped);
  const std::vector<int64_t> every = AllTokens(all.out);
  for (int threads : {1, 2, 4}) {
    for (int64_t cap : {int64_t{1000}, int64_t{25}, whole.train.info.tokens}) {
      PrepareOptions o = all;
      o.out = dir.File("cap.bin");
      o.threads = threads;
      o.batch_bytes = 512;  // the cap falls many batches in
      o.max_tokens = cap;
      CART_ASSERT_OK_AND_ASSIGN(PrepareResult r, Prepare(o));
      const std::vector<int64_t> ids = AllTokens(o.out);
      ASSERT_EQ(static_cast<int64_t>(ids.size()), cap) << threads << " threads";
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), every.begin()));
      EXPECT_EQ(r.train.info.tokens, cap);
      EXPECT_EQ(r.capped, true);
      // Documents counted are the whole ones; the cut one (no EOS) is flagged.
      const int64_t eos = std::count(ids.begin(), ids.end(), 257);
      EXPECT_EQ(r.train.documents, eos);
      EXPECT_EQ(r.last_document_cut, ids.back() != 257);
    }
  }
}

TEST(SourceMixtureTest, SourcesArePreparedCappedAndInterleavedAsTheDryRunSaid) {
  TempDir dir;
  std::string a, b;
  for (int i = 0; i < 400; ++i) a += "aaaa " + std::to_string(i) + "\n<|endoftext|>\n";
  for (int i = 0; i < 900; ++i) b += "bb " + std::to_string(i) + "\n<|endoftext|>\n";
  WriteFile(dir.path() / "a.txt", a);
  std::filesystem::create_directories(dir.path() / "b");
  WriteFile(dir.path() / "b" / "part1.txt", b.substr(0, b.size() / 2));
  SourceMixtureOptions o;
  o.sources = {{"tiny", {{dir.File("a.txt")}}, 3, 0},
               {"wiki", {{dir.File("b/part1.txt")}}, 2, 2000}};
  o.out = dir.File("mix.bin");
  o.chunk_tokens = 64;
  CART_ASSERT_OK_AND_ASSIGN(SourceMixturePlan plan, PlanSourceMixture(o, 1 << 20));
  CART_ASSERT_OK_AND_ASSIGN(SourceMixtureResult r, PrepareSourceMixture(o));
  ASSERT_EQ(r.sources.size(), 2u);
  EXPECT_EQ(r.sources[0].file.path, dir.File("mix.tiny.bin"));
  EXPECT_FALSE(r.sources[0].capped);
  EXPECT_TRUE(r.sources[1].capped);
  EXPECT_EQ(r.sources[1].file.info.tokens, 2000);
  // The sample read everything, so the dry run's counts are exact, the mixture's too.
  EXPECT_TRUE(plan.estimates[0].exact);
  EXPECT_EQ(plan.tokens[0], r.sources[0].file.info.tokens);
  EXPECT_EQ(plan.tokens[1], 2000);
  EXPECT_EQ(plan.mixture_tokens, r.mixture.tokens);
  EXPECT_EQ(plan.disk_bytes,
            static_cast<uint64_t>(2 * (plan.tokens[0] + plan.tokens[1] + r.mixture.tokens)));
  // Cycles of 3 chunks of tiny then 2 of wiki, read from each source's start.
  const std::vector<int64_t> mix = AllTokens(o.out), tiny = AllTokens(dir.File("mix.tiny.bin")),
                             wiki = AllTokens(dir.File("mix.wiki.bin"));
  ASSERT_GE(mix.size(), 5u * 64);
  EXPECT_TRUE(std::equal(mix.begin(), mix.begin() + 3 * 64, tiny.begin()));
  EXPECT_TRUE(std::equal(mix.begin() + 3 * 64, mix.begin() + 5 * 64, wiki.begin()));
  EXPECT_EQ(mix.size() % (5 * 64), 0u);
  // Bad sources are named.
  SourceMixtureOptions bad = o;
  bad.sources[1].name = "tiny";
  EXPECT_THAT(PrepareSourceMixture(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'tiny' is given twice")));
  bad = o;
  bad.sources[0].weight = 0;
  EXPECT_THAT(PlanSourceMixture(bad, 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight 0")));
  bad = o;
  bad.sources[0].name = "a b";
  EXPECT_THAT(PrepareSourceMixture(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("source name 'a b'")));
}

TEST(SourceMixtureTest, ASampleEstimatesALargerSourceClosely) {
  TempDir dir;
  WriteFile(dir.path() / "s.txt", Stories(40000));  // about 1.2 MB
  PrepareOptions o;
  o.inputs = {{dir.File("s.txt")}};
  o.out = dir.File("s.bin");
  CART_ASSERT_OK_AND_ASSIGN(PrepareResult r, Prepare(o));
  CART_ASSERT_OK_AND_ASSIGN(SourceEstimate e, EstimateTokens(o.inputs, "bytes", 64 << 10));
  EXPECT_FALSE(e.exact);
  EXPECT_LT(e.sampled_bytes, uint64_t{80} << 10);
  const double error = std::abs(static_cast<double>(e.tokens - r.train.info.tokens)) /
                       static_cast<double>(r.train.info.tokens);
  EXPECT_LT(error, 0.05) << e.tokens << " estimated, " << r.train.info.tokens << " written";
  // The same text gzipped: its content size comes from the gzip trailer.
  const std::string text = Stories(80000);
  gzFile gz = gzopen(dir.File("s.txt.gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  WriteFile(dir.path() / "s2.txt", text);
  o.inputs = {{dir.File("s2.txt")}};
  o.out = dir.File("s2.bin");
  CART_ASSERT_OK_AND_ASSIGN(r, Prepare(o));
  CART_ASSERT_OK_AND_ASSIGN(e, EstimateTokens({{dir.File("s.txt.gz")}}, "bytes", 64 << 10));
  EXPECT_FALSE(e.exact);
  const double gz_error = std::abs(static_cast<double>(e.tokens - r.train.info.tokens)) /
                          static_cast<double>(r.train.info.tokens);
  EXPECT_LT(gz_error, 0.05) << e.tokens << " estimated from gzip, " << r.train.info.tokens;
}

}  // namespace
}  // namespace cart::data
