// Data lineage in the store: the files each run reads, recorded at submit or by the first
// attempt, kept once recorded, handed to every attempt with its lease, inherited by derived runs,
// and deleted with the sweep.

#include <sqlite3.h>

#include <utility>

#include "common/strings.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::kGiB;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

data::FileIdentity Identity(char digit, int64_t tokens = 1000) {
  data::FileIdentity id;
  id.sha256 = std::string(64, digit);
  id.size_bytes = tokens >= 0 ? tokens * 2 : 777;
  id.tokens = tokens;
  id.tokenizer = "gpt2:/opt/gpt2";
  id.tokenizer_sha256 = std::string(64, 'e');
  return id;
}

RunDataRecord Row(const std::string& role, const std::string& path,
                  std::optional<data::FileIdentity> identity = std::nullopt,
                  const std::string& by = "") {
  RunDataRecord r;
  r.role = role;
  r.path = path;
  r.identity = std::move(identity);
  r.recorded_by = by;
  return r;
}

class LineageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    CART_ASSERT_OK(store_->RegisterWorker("w1", "RTX 3090", 24 * kGiB, kT0));
  }

  // Leases run `id` to w1 and returns the claim (its data rows included).
  Claim Lease(int64_t id) {
    auto claim = store_->ClaimRun("w1", id, 24 * kGiB, kT0 + 10);
    EXPECT_TRUE(claim.ok() && claim->has_value()) << claim.status();
    return claim.ok() && claim->has_value() ? **claim : Claim{};
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
};

TEST_F(LineageTest, SubmitRecordsKnownFilesAndLeavesTheRestForTheFirstAttempt) {
  NewRun run = MakeRun("a", {});
  run.data = {Row("train", "mix.bin", Identity('1'), "submit"), Row("val:wiki", "wiki.val.bin")};
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep created,
                            store_->CreateSweep(MakeSweep("s", {run}), By("user:a", kT0)));
  const int64_t id = created.run_ids[0];

  Claim claim = Lease(id);
  ASSERT_EQ(claim.data.size(), 2u);
  EXPECT_EQ(claim.data[0].role, "train");
  ASSERT_TRUE(claim.data[0].identity.has_value());
  EXPECT_EQ(claim.data[0].identity->sha256, std::string(64, '1'));
  EXPECT_EQ(claim.data[0].identity->tokens, 1000);
  EXPECT_EQ(claim.data[0].recorded_by, "submit");
  EXPECT_EQ(claim.data[0].recorded_us, kT0);
  EXPECT_EQ(claim.data[1].role, "val:wiki");
  EXPECT_FALSE(claim.data[1].identity.has_value());

  // The attempt records the val file, and tries to record another train file: the train
  // identity taken at submit stays.
  CART_ASSERT_OK_AND_ASSIGN(
      auto rows, store_->RecordRunData(id, claim.attempt,
                                       {Row("val:wiki", "wiki.val.bin", Identity('2', 50), "w1"),
                                        Row("train", "mix.bin", Identity('9'), "w1")},
                                       kT0 + 20));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].identity->sha256, std::string(64, '1'));
  EXPECT_EQ(rows[0].recorded_by, "submit");
  ASSERT_TRUE(rows[1].identity.has_value());
  EXPECT_EQ(rows[1].identity->sha256, std::string(64, '2'));
  EXPECT_EQ(rows[1].recorded_by, "w1");
  EXPECT_EQ(rows[1].recorded_us, kT0 + 20);
  CART_ASSERT_OK_AND_ASSIGN(auto read, store_->RunData(id));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[1].identity->tokens, 50);
}

TEST_F(LineageTest, OnlyTheCurrentAttemptRecordsAndMalformedEntriesAreRefusedNamingTheField) {
  NewRun run = MakeRun("a", {});
  run.data = {Row("train", "mix.bin")};
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep created,
                            store_->CreateSweep(MakeSweep("s", {run}), By("user:a", kT0)));
  const int64_t id = created.run_ids[0];
  // Not leased: fenced.
  EXPECT_THAT(store_->RecordRunData(id, 1, {Row("train", "mix.bin", Identity('1'))}, kT0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("data record")));
  Claim claim = Lease(id);
  EXPECT_THAT(
      store_->RecordRunData(id, claim.attempt + 1, {Row("train", "mix.bin", Identity('1'))}, kT0),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("data record")));
  data::FileIdentity bad = Identity('1');
  bad.sha256 = "XYZ";
  EXPECT_THAT(store_->RecordRunData(id, claim.attempt, {Row("train", "mix.bin", bad)}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sha256 'XYZ'")));
  EXPECT_THAT(
      store_->RecordRunData(id, claim.attempt, {Row("weights", "w.bin", Identity('1'))}, kT0),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("data role 'weights' is not train, val:NAME or task:NAME")));
  EXPECT_THAT(
      store_->RecordRunData(
          id, claim.attempt,
          {Row("train", "mix.bin", Identity('1')), Row("train", "mix.bin", Identity('2'))}, kT0),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("given twice")));
  EXPECT_THAT(store_->RecordRunData(id, claim.attempt, {Row("train", "mix.bin")}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no identity")));
  // Nothing of the refused calls was stored.
  CART_ASSERT_OK_AND_ASSIGN(auto read, store_->RunData(id));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_FALSE(read[0].identity.has_value());
  // A role the run had no row for (a run stored before lineage existed) gets one.
  CART_ASSERT_OK_AND_ASSIGN(
      auto rows,
      store_->RecordRunData(id, claim.attempt,
                            {Row("task:lambada", "lambada.jsonl", Identity('3', -1))}, kT0));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].role, "task:lambada");
  EXPECT_EQ(rows[1].identity->tokens, -1);
  // Up to what a config can name (129 files); invented roles past it are refused, whatever
  // calls they come in (thousands of them made one run's answer 78 MB).
  std::vector<RunDataRecord> more;
  for (int i = 0; i < 127; ++i) {
    more.push_back(Row(StrCat("val:v", i), StrCat("v", i, ".bin"), Identity('4')));
  }
  CART_ASSERT_OK_AND_ASSIGN(rows, store_->RecordRunData(id, claim.attempt, more, kT0));
  EXPECT_EQ(rows.size(), 129u);
  EXPECT_THAT(
      store_->RecordRunData(id, claim.attempt, {Row("val:one-more", "x.bin", Identity('5'))}, kT0),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("would make 130 files for one run; a run reads at most 129")));
  CART_ASSERT_OK_AND_ASSIGN(read, store_->RunData(id));
  EXPECT_EQ(read.size(), 129u);
}

// An attempt's environment record (what it ran on) is read back with the attempt, in its order;
// attempts that ran on the same environment share one stored copy; only the current attempt
// records, and an item past the bounds is refused naming it, with nothing stored.
TEST_F(LineageTest, AnAttemptsEnvironmentIsReadBackWithItAndStoredOncePerContent) {
  CART_ASSERT_OK_AND_ASSIGN(
      CreatedSweep created,
      store_->CreateSweep(MakeSweep("s", {MakeRun("a", {}), MakeRun("b", {}), MakeRun("c", {})}),
                          By("user:a", kT0)));
  const int64_t a = created.run_ids[0];
  const int64_t b = created.run_ids[1];
  const std::vector<std::pair<std::string, std::string>> cpu = {
      {"torch.version", "1.13.1"},
      {"blas.library", "/usr/lib/libopenblas.so.0"},
      {"device", "cpu"}};
  EXPECT_THAT(store_->RecordEnvironment(a, 1, cpu),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("environment record")));
  const Claim first = Lease(a);
  const Claim second = Lease(b);
  CART_ASSERT_OK(store_->RecordEnvironment(a, first.attempt, cpu));
  CART_ASSERT_OK(store_->RecordEnvironment(b, second.attempt, cpu));
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(a));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].environment, cpu);
  CART_ASSERT_OK_AND_ASSIGN(attempts, store_->ListAttempts(created.run_ids[2]));
  EXPECT_TRUE(attempts.empty());
  // Refused, naming the item; what was stored stays.
  EXPECT_THAT(
      store_->RecordEnvironment(a, first.attempt, {{"Torch", "2"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("environment item key 'Torch'")));
  EXPECT_THAT(store_->RecordEnvironment(a, first.attempt, {{"os", "Debian\n12"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'os' must be one line")));
  std::vector<std::pair<std::string, std::string>> many;
  for (size_t i = 0; i <= RunStore::kMaxEnvironmentItems; ++i)
    many.emplace_back(StrCat("k", i), "v");
  EXPECT_THAT(store_->RecordEnvironment(a, first.attempt, many),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 96")));
  CART_ASSERT_OK_AND_ASSIGN(attempts, store_->ListAttempts(a));
  EXPECT_EQ(attempts[0].environment, cpu);
  // Another environment for b: b reads it, a keeps its own; two stored copies in all.
  auto gpu = cpu;
  gpu.back().second = "cuda:0";
  CART_ASSERT_OK(store_->RecordEnvironment(b, second.attempt, gpu));
  CART_ASSERT_OK_AND_ASSIGN(attempts, store_->ListAttempts(b));
  EXPECT_EQ(attempts[0].environment, gpu);
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(dir_.File("cart.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM environments", -1, &count, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(count, 0), 2) << "the same environment was stored twice";
  sqlite3_finalize(count);
  sqlite3_close(db);
}

// Device classes (docs/architecture.md "Device classes"): each attempt records its worker's
// device; the run lists the classes of the attempts whose work it kept, and an attempt that
// recorded a checkpoint stays among them after retention deletes that checkpoint's row.
TEST_F(LineageTest, ARunKeepsTheClassOfAnAttemptWhoseCheckpointRetentionDeleted) {
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep created,
                            store_->CreateSweep(MakeSweep("s", {MakeRun("a", {})}), By("u", kT0)));
  const int64_t run = created.run_ids[0];
  CART_ASSERT_OK(store_->RegisterWorker("small", "NVIDIA GeForce RTX 3050", 8 * kGiB, kT0));
  CART_ASSERT_OK(store_->RegisterWorker("big", "NVIDIA GeForce RTX 3090", 24 * kGiB, kT0));
  auto sha = [](char c) { return std::string(64, c); };
  CART_ASSERT_OK_AND_ASSIGN(auto first, store_->ClaimRun("small", run, 8 * kGiB, kT0 + 1));
  ASSERT_TRUE(first.has_value());
  CART_ASSERT_OK(store_->MarkRunning(run, first->attempt, kT0 + 2));
  CART_ASSERT_OK(
      store_->RecordCheckpoint(run, first->attempt, {10, sha('a'), 1, "a/10"}, kT0 + 3).status());
  CART_ASSERT_OK(store_->RecordAttemptOutcome(run, first->attempt, AttemptOutcome::kDrained,
                                              By("worker:small", kT0 + 4, "stopping")));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord pinned, store_->GetRun(run));
  EXPECT_EQ(pinned.checkpoint_class, "NVIDIA GeForce RTX 3050");
  EXPECT_EQ(pinned.DeviceClassPin(), "NVIDIA GeForce RTX 3050");
  // The 3090's claim is refused while the checkpoint pins the run; unpinned, it takes it.
  CART_ASSERT_OK_AND_ASSIGN(auto refused, store_->ClaimRun("big", run, 24 * kGiB, kT0 + 5));
  EXPECT_FALSE(refused.has_value());
  CART_ASSERT_OK(store_->SetDeviceClassPolicy(run, /*any=*/true, By("u", kT0 + 6)).status());
  CART_ASSERT_OK_AND_ASSIGN(auto second, store_->ClaimRun("big", run, 24 * kGiB, kT0 + 7));
  ASSERT_TRUE(second.has_value());
  CART_ASSERT_OK(store_->MarkRunning(run, second->attempt, kT0 + 8));
  for (int64_t step : {20, 30}) {
    CART_ASSERT_OK(
        store_
            ->RecordCheckpoint(run, second->attempt,
                               {step, sha(step == 20 ? 'b' : 'c'), 1, StrCat("b/", step)}, kT0 + 9)
            .status());
  }
  CART_ASSERT_OK(store_->PruneCheckpoints(run, 1).status());
  CART_ASSERT_OK_AND_ASSIGN(std::vector<CheckpointRecord> left, store_->ListCheckpoints(run));
  ASSERT_EQ(left.size(), 1u);  // the step-10 checkpoint of the 3050's attempt is gone
  CART_ASSERT_OK_AND_ASSIGN(RunRecord got, store_->GetRun(run));
  EXPECT_EQ(got.device_classes,
            (std::vector<std::string>{"NVIDIA GeForce RTX 3050", "NVIDIA GeForce RTX 3090"}));
  EXPECT_TRUE(got.SpansClasses());
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(run));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].device_class, "NVIDIA GeForce RTX 3050");
  EXPECT_EQ(attempts[1].device_class, "NVIDIA GeForce RTX 3090");
}

// A sweep's provenance is stored as its client gave it and read back by name; a sweep submitted
// without one has none; a diff past its bound is refused naming the sizes, with nothing stored;
// the record goes with the sweep.
TEST_F(LineageTest, ASweepsProvenanceIsKeptWithItAndBounded) {
  NewSweep with = MakeSweep("p", {MakeRun("a", {})});
  with.provenance = SweepProvenance{{{"file.path", "/lab/p.yaml"}, {"git.dirty", "true"}},
                                    "--- a/notes\n+++ b/notes\n+lr 1e-3\n"};
  CART_ASSERT_OK(store_->CreateSweep(with, By("user:a", kT0)).status());
  CART_ASSERT_OK(
      store_->CreateSweep(MakeSweep("q", {MakeRun("a", {})}), By("user:a", kT0)).status());
  CART_ASSERT_OK_AND_ASSIGN(std::optional<SweepProvenance> read, store_->GetSweepProvenance("p"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->items, with.provenance->items);
  EXPECT_EQ(read->git_diff, with.provenance->git_diff);
  CART_ASSERT_OK_AND_ASSIGN(read, store_->GetSweepProvenance("q"));
  EXPECT_FALSE(read.has_value());
  EXPECT_THAT(store_->GetSweepProvenance("nope"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  NewSweep big = MakeSweep("r", {MakeRun("a", {})});
  big.provenance = SweepProvenance{{}, std::string(kMaxProvenanceDiffBytes + 1, 'd')};
  EXPECT_THAT(store_->CreateSweep(big, By("user:a", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the git diff is 1048577 bytes; at most 1048576")));
  EXPECT_THAT(store_->GetSweepProvenance("r"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  CART_ASSERT_OK(store_->DeleteSweep("p").status());
  CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, store_->IntegrityCheck());
  EXPECT_TRUE(report.ok);
}

TEST_F(LineageTest, DerivedRunsInheritTheFirstAttemptsRecordAndNewOnesTheParentsAtSubmit) {
  NewRun parent = MakeRun("p", {});
  parent.data = {Row("train", "mix.bin"), Row("val:wiki", "wiki.val.bin")};
  NewRun child = MakeRun("c", {});
  child.parent_name = "p";
  child.parent_checkpoint = "final";
  // The child reads the same train file and another validation file.
  child.data = {Row("train", "mix.bin"), Row("val:wiki", "other.val.bin")};
  NewRun grandchild = MakeRun("g", {});
  grandchild.parent_name = "c";
  grandchild.parent_checkpoint = "final";
  grandchild.data = {Row("train", "mix.bin")};
  CART_ASSERT_OK_AND_ASSIGN(
      CreatedSweep created,
      store_->CreateSweep(MakeSweep("s", {parent, child, grandchild}), By("user:a", kT0)));
  const int64_t p = created.run_ids[0], c = created.run_ids[1], g = created.run_ids[2];
  Claim claim = Lease(p);
  CART_ASSERT_OK(store_
                     ->RecordRunData(p, claim.attempt,
                                     {Row("train", "mix.bin", Identity('1'), "worker w1"),
                                      Row("val:wiki", "wiki.val.bin", Identity('2'), "worker w1")},
                                     kT0 + 5)
                     .status());
  CART_ASSERT_OK_AND_ASSIGN(auto child_rows, store_->RunData(c));
  ASSERT_EQ(child_rows.size(), 2u);
  ASSERT_TRUE(child_rows[0].identity.has_value());
  EXPECT_EQ(child_rows[0].identity->sha256, std::string(64, '1'));
  EXPECT_EQ(child_rows[0].recorded_by, StrCat("run ", p, " (its parent)"));
  EXPECT_FALSE(child_rows[1].identity.has_value()) << "another path is another file";
  CART_ASSERT_OK_AND_ASSIGN(auto grand_rows, store_->RunData(g));
  ASSERT_TRUE(grand_rows[0].identity.has_value());
  EXPECT_EQ(grand_rows[0].identity->sha256, std::string(64, '1'));

  // A run of a later sweep derived from p takes p's identities when it is stored.
  NewRun later = MakeRun("l", {});
  later.parent_run_id = p;
  later.parent_checkpoint = "final";
  later.data = {Row("train", "mix.bin"), Row("val:wiki", "wiki.val.bin")};
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep second,
                            store_->CreateSweep(MakeSweep("t", {later}), By("user:a", kT0 + 9)));
  CART_ASSERT_OK_AND_ASSIGN(auto later_rows, store_->RunData(second.run_ids[0]));
  ASSERT_EQ(later_rows.size(), 2u);
  EXPECT_EQ(later_rows[1].identity->sha256, std::string(64, '2'));
  EXPECT_EQ(later_rows[1].recorded_by, StrCat("run ", p, " (its parent)"));
  EXPECT_EQ(later_rows[1].recorded_us, kT0 + 9);
}

TEST_F(LineageTest, DeletingASweepDeletesItsRowsAndTheIdentitiesNoRunNames) {
  NewRun a = MakeRun("a", {});
  a.data = {Row("train", "mix.bin", Identity('1'), "submit")};
  NewRun b = MakeRun("b", {});
  b.data = {Row("train", "other.bin", Identity('2'), "submit")};
  CART_ASSERT_OK(store_->CreateSweep(MakeSweep("s", {a}), By("user:a", kT0)).status());
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep t,
                            store_->CreateSweep(MakeSweep("t", {b}), By("user:a", kT0)));
  CART_ASSERT_OK(store_->DeleteSweep("s").status());
  CART_ASSERT_OK_AND_ASSIGN(auto rows, store_->RunData(t.run_ids[0]));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].identity->sha256, std::string(64, '2'));
  CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, store_->IntegrityCheck());
  EXPECT_TRUE(report.ok);
  store_.reset();
  // s's identity went with it; t's is stored once.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(dir_.File("cart.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(db, "SELECT count(*), min(sha256) FROM data_files", -1, &count, nullptr),
      SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(count, 0), 1);
  EXPECT_EQ(reinterpret_cast<const char*>(sqlite3_column_text(count, 1)), std::string(64, '2'));
  sqlite3_finalize(count);
  sqlite3_close(db);
}

}  // namespace
}  // namespace cart::store
