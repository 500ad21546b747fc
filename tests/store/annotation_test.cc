// Tags and notes on runs and sweeps: who set them and when, the filter on tags (every page and
// results query shares it), the limits, and deletion with the sweep.

#include <utility>

#include "common/strings.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::vector<Tag>& tags) {
  std::vector<std::string> out;
  for (const Tag& tag : tags) out.push_back(tag.name);
  return out;
}

std::vector<std::string> RunNames(const std::vector<RunRecord>& runs) {
  std::vector<std::string> out;
  for (const RunRecord& run : runs) out.push_back(run.name);
  return out;
}

AnnotationChange Add(std::vector<std::string> tags) {
  AnnotationChange change;
  change.add_tags = std::move(tags);
  return change;
}

class AnnotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    auto created =
        store_->CreateSweep(MakeSweep("s", {MakeRun("a", {{"R", "1"}}), MakeRun("b", {{"R", "2"}}),
                                            MakeRun("c", {{"R", "2"}})}),
                            By("user:a", kT0));
    ASSERT_TRUE(created.ok()) << created.status();
    ids_ = created->run_ids;
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
  std::vector<int64_t> ids_;
};

TEST_F(AnnotationTest, TagsKeepWhoSetThemFirstAndWhenAndComeBackSortedWithEveryRead) {
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run,
                            store_->AnnotateRun(ids_[0], Add({"zeta", "leak"}), By("user:a", 10)));
  EXPECT_EQ(Names(run.tags), (std::vector<std::string>{"leak", "zeta"}));
  // Setting a tag again keeps its first setter and time; removing a missing one is no error.
  AnnotationChange again = Add({"leak", "rerun-of:12"});
  again.remove_tags = {"zeta", "never-set"};
  CART_ASSERT_OK_AND_ASSIGN(run, store_->AnnotateRun(ids_[0], again, By("user:b", 20)));
  ASSERT_EQ(Names(run.tags), (std::vector<std::string>{"leak", "rerun-of:12"}));
  EXPECT_EQ(run.tags[0].who, "user:a");
  EXPECT_EQ(run.tags[0].at_us, 10);
  EXPECT_EQ(run.tags[1].who, "user:b");
  EXPECT_EQ(run.tags[1].at_us, 20);
  // Every way of reading a run carries them: by id, by name, in lists and pages.
  CART_ASSERT_OK_AND_ASSIGN(RunRecord by_id, store_->GetRun(ids_[0]));
  EXPECT_EQ(Names(by_id.tags), Names(run.tags));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord by_name, store_->FindRun("s", "a"));
  EXPECT_EQ(Names(by_name.tags), Names(run.tags));
  CART_ASSERT_OK_AND_ASSIGN(RunPage page, store_->ListRunPage(RunPageRequest{}));
  ASSERT_EQ(page.rows.size(), 3u);
  EXPECT_EQ(Names(page.rows[0].run.tags), Names(run.tags));
  EXPECT_TRUE(page.rows[1].run.tags.empty());
  // A state change is no annotation: the run's events are untouched.
  CART_ASSERT_OK_AND_ASSIGN(auto events, store_->RunEvents(ids_[0]));
  EXPECT_EQ(events.size(), 1u);  // its creation
}

TEST_F(AnnotationTest, ANoteIsReplacedWholeWithItsLastWriterAndClearedByEmptyText) {
  AnnotationChange note;
  note.note = "diverged at step 900:\n\tlr too high";
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->AnnotateRun(ids_[1], note, By("user:a", 5)));
  EXPECT_EQ(run.note.text, "diverged at step 900:\n\tlr too high");
  EXPECT_EQ(run.note.who, "user:a");
  EXPECT_EQ(run.note.at_us, 5);
  CART_ASSERT_OK_AND_ASSIGN(run, store_->AnnotateRun(ids_[1], Add({"x"}), By("user:b", 6)));
  EXPECT_EQ(run.note.who, "user:a") << "a tag change leaves the note alone";
  note.note = "";
  CART_ASSERT_OK_AND_ASSIGN(run, store_->AnnotateRun(ids_[1], note, By("user:b", 7)));
  EXPECT_EQ(run.note.text, "");
  EXPECT_EQ(run.note.who, "user:b");
}

TEST_F(AnnotationTest, TheTagFilterKeepsRunsCarryingEveryTagInListsPagesAndResults) {
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], Add({"leak"}), By("u", 1)));
  CART_ASSERT_OK(store_->AnnotateRun(ids_[1], Add({"leak", "paper"}), By("u", 1)));
  CART_ASSERT_OK(store_->AnnotateRun(ids_[2], Add({"paper"}), By("u", 1)));
  RunFilter filter;
  filter.tags = {"leak"};
  CART_ASSERT_OK_AND_ASSIGN(auto runs, store_->ListRuns(filter));
  EXPECT_EQ(RunNames(runs), (std::vector<std::string>{"a", "b"}));
  filter.tags = {"leak", "paper"};
  CART_ASSERT_OK_AND_ASSIGN(runs, store_->ListRuns(filter));
  EXPECT_EQ(RunNames(runs), (std::vector<std::string>{"b"}));
  filter.tags = {"nobody-has-this"};
  CART_ASSERT_OK_AND_ASSIGN(runs, store_->ListRuns(filter));
  EXPECT_TRUE(runs.empty());
  RunPageRequest request;
  request.filter.tags = {"paper"};
  CART_ASSERT_OK_AND_ASSIGN(RunPage page, store_->ListRunPage(request));
  EXPECT_EQ(page.total, 2);
  // A results table over the tagged runs only: each run logs its id as "m".
  cart::store::testing::FinishAllQueued(*store_, [](const RunRecord& run) {
    return std::vector<MetricPoint>{MetricPoint{1, "m", static_cast<double>(run.id), kT0}};
  });
  PivotRequest pivot;
  pivot.metric = "m";
  pivot.row_key = "R";
  pivot.col_key = "d";
  pivot.field = SummaryField::kFinal;
  pivot.filter.tags = {"paper"};
  CART_ASSERT_OK_AND_ASSIGN(PivotTable table, store_->Pivot(pivot));
  EXPECT_EQ(table.row_values, (std::vector<std::string>{"2"}));
  EXPECT_EQ(table.cells[0][0].n, 2);  // b and c, not a
  EXPECT_EQ(table.cells[0][0].mean, (ids_[1] + ids_[2]) / 2.0);
  // More tags than a run can carry: the store refuses the filter, whichever front end asked.
  std::vector<std::string> many;
  for (size_t i = 0; i <= kMaxTags; ++i) many.push_back(StrCat("t", i));
  filter.tags = many;
  request.filter.tags = many;
  pivot.filter.tags = many;
  const auto too_many =
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(StrCat("at most ", kMaxTags, " tags in a filter, not ", kMaxTags + 1)));
  EXPECT_THAT(store_->ListRuns(filter).status(), too_many);
  EXPECT_THAT(store_->ListRunPage(request).status(), too_many);
  EXPECT_THAT(store_->Pivot(pivot).status(), too_many);
}

TEST_F(AnnotationTest, BadTagsNotesAndTooManyTagsAreRefusedNamingTheFaultAndChangeNothing) {
  EXPECT_THAT(store_->AnnotateRun(ids_[0], Add({"has space"}), By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tag 'has space' must be 1..64 letters, digits")));
  EXPECT_THAT(store_->AnnotateRun(ids_[0], Add({std::string(65, 'x')}), By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be 1..64")));
  EXPECT_THAT(store_->AnnotateRun(ids_[0], Add({""}), By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tag ''")));
  AnnotationChange both = Add({"x"});
  both.remove_tags = {"x"};
  EXPECT_THAT(store_->AnnotateRun(ids_[0], both, By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("both added and removed")));
  AnnotationChange note;
  note.note = std::string(kMaxNoteBytes + 1, 'n');
  EXPECT_THAT(store_->AnnotateRun(ids_[0], note, By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 8192 bytes")));
  note.note = "bell\a";
  EXPECT_THAT(store_->AnnotateRun(ids_[0], note, By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("control character (code 7) at byte 4")));
  note.note = "latin-1 \xe9t\xe9";
  EXPECT_THAT(store_->AnnotateRun(ids_[0], note, By("u", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not UTF-8 (byte 8")));
  EXPECT_THAT(store_->AnnotateRun(987654, Add({"x"}), By("u", 1)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run 987654")));
  EXPECT_THAT(store_->AnnotateSweep("nope", Add({"x"}), By("u", 1)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  // 32 tags fit; a 33rd is refused, and the change that asked for it (with its note) is undone.
  std::vector<std::string> many;
  for (int i = 0; i < 32; ++i) many.push_back("t" + std::to_string(i));
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], Add(many), By("u", 1)));
  AnnotationChange one_more = Add({"t-last"});
  one_more.note = "should not be kept";
  EXPECT_THAT(store_->AnnotateRun(ids_[0], one_more, By("u", 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("run 1 would carry 33 tags; at most 32")));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->GetRun(ids_[0]));
  EXPECT_EQ(run.tags.size(), 32u);
  EXPECT_EQ(run.note.text, "");
}

// What one user does to another's tags and notes is kept: who changed what, and when, with who
// had set a removed tag and the text a replaced note had; changes that changed nothing are not.
TEST_F(AnnotationTest, EveryChangeOfTagsAndNotesIsKeptWithWhoMadeItAndWhatItReplaced) {
  AnnotationChange first = Add({"leak", "keep"});
  first.note = "alice's reading of it";
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], first, By("user:alice", 10)));
  AnnotationChange second = Add({"keep"});  // set already: no change
  second.remove_tags = {"leak", "never-set"};
  second.note = "bob's instead";
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], second, By("user:bob", 20)));
  AnnotationChange same;
  same.note = "bob's instead";  // the same text again: no change
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], same, By("user:bob", 30)));

  CART_ASSERT_OK_AND_ASSIGN(std::vector<AnnotationEvent> history,
                            store_->RunAnnotationHistory(ids_[0]));
  ASSERT_EQ(history.size(), 5u);
  using Kind = AnnotationEvent::Kind;
  auto expect = [&](size_t i, Kind kind, const std::string& who, int64_t at,
                    const std::string& value, const std::string& previous) {
    SCOPED_TRACE(i);
    EXPECT_EQ(history[i].kind, kind);
    EXPECT_EQ(history[i].who, who);
    EXPECT_EQ(history[i].at_us, at);
    EXPECT_EQ(history[i].value, value);
    EXPECT_EQ(history[i].previous, previous);
  };
  expect(0, Kind::kTagAdded, "user:alice", 10, "leak", "");
  expect(1, Kind::kTagAdded, "user:alice", 10, "keep", "");
  expect(2, Kind::kNote, "user:alice", 10, "alice's reading of it", "");
  expect(3, Kind::kTagRemoved, "user:bob", 20, "leak", "user:alice");
  expect(4, Kind::kNote, "user:bob", 20, "bob's instead", "alice's reading of it");
  CART_ASSERT_OK_AND_ASSIGN(auto other, store_->RunAnnotationHistory(ids_[1]));
  EXPECT_TRUE(other.empty());
  EXPECT_THAT(store_->RunAnnotationHistory(999).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));

  // A sweep's history is its own, and bounded: the newest kMaxAnnotationHistory changes.
  for (int64_t i = 0; i <= kMaxAnnotationHistory; ++i) {
    AnnotationChange note;
    note.note = StrCat("take ", i);
    CART_ASSERT_OK(store_->AnnotateSweep("s", note, By("user:carol", 100 + i)));
  }
  CART_ASSERT_OK_AND_ASSIGN(std::vector<AnnotationEvent> sweep,
                            store_->SweepAnnotationHistory("s"));
  ASSERT_EQ(sweep.size(), static_cast<size_t>(kMaxAnnotationHistory));
  EXPECT_EQ(sweep.front().value, "take 1");
  EXPECT_EQ(sweep.front().previous, "take 0");
  EXPECT_EQ(sweep.back().value, StrCat("take ", kMaxAnnotationHistory));
  CART_ASSERT_OK_AND_ASSIGN(history, store_->RunAnnotationHistory(ids_[0]));
  EXPECT_EQ(history.size(), 5u) << "the sweep's changes are not its runs'";

  // Deleted with the sweep; the integrity check (foreign keys) passes.
  CART_ASSERT_OK(store_->DeleteSweep("s"));
  CART_ASSERT_OK(store_->CreateSweep(MakeSweep("s", {MakeRun("a", {})}), By("u", 5)));
  CART_ASSERT_OK_AND_ASSIGN(sweep, store_->SweepAnnotationHistory("s"));
  EXPECT_TRUE(sweep.empty());
  CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, store_->IntegrityCheck());
  EXPECT_TRUE(report.ok);
}

TEST_F(AnnotationTest, SweepTagsAndNotesAreTheSweepsOwnAndGoWithItWhenDeleted) {
  AnnotationChange change = Add({"stage1", "paper"});
  change.note = "the first stage of the paper's program";
  CART_ASSERT_OK_AND_ASSIGN(SweepRecord sweep, store_->AnnotateSweep("s", change, By("user:a", 3)));
  EXPECT_EQ(Names(sweep.tags), (std::vector<std::string>{"paper", "stage1"}));
  EXPECT_EQ(sweep.note.text, "the first stage of the paper's program");
  EXPECT_EQ(sweep.run_counts.at(RunState::kQueued), 3);
  CART_ASSERT_OK_AND_ASSIGN(auto all, store_->ListSweeps());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(Names(all[0].tags), Names(sweep.tags));
  CART_ASSERT_OK_AND_ASSIGN(auto progress, store_->ListSweepProgress());
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(Names(progress[0].sweep.tags), Names(sweep.tags));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->GetRun(ids_[0]));
  EXPECT_TRUE(run.tags.empty()) << "a sweep's tags are not its runs'";
  CART_ASSERT_OK(store_->AnnotateRun(ids_[0], Add({"leak"}), By("u", 4)));
  CART_ASSERT_OK(store_->DeleteSweep("s"));
  // A new sweep of the same name starts bare, and the integrity check (foreign keys) passes.
  CART_ASSERT_OK(store_->CreateSweep(MakeSweep("s", {MakeRun("a", {})}), By("u", 5)));
  CART_ASSERT_OK_AND_ASSIGN(SweepRecord fresh, store_->GetSweep("s"));
  EXPECT_TRUE(fresh.tags.empty());
  EXPECT_EQ(fresh.note.text, "");
  CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, store_->IntegrityCheck());
  EXPECT_TRUE(report.ok);
}

}  // namespace
}  // namespace cart::store
