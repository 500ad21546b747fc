// Data lineage end to end (docs/architecture.md "Runs are bound to their data by content"): real
// cartd and cart-worker processes, the run's data files recorded at submit or by its first worker,
// a worker whose file at the run's path is another build refused before it trains, and the run
// resumed exactly once the recorded file is back.

#include <signal.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/sha256.h"
#include "common/strings.h"
#include "data/synth.h"
#include "data/token_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const cart::v1::DataIdentity* Role(const cart::v1::GetRunResponse& run, const std::string& role) {
  for (const auto& d : run.data()) {
    if (d.role() == role) return &d;
  }
  return nullptr;
}

std::string Sha256Of(const std::string& bin) {
  absl::StatusOr<data::TokenFileInfo> info = data::ReadTokenFileInfo(data::MetadataPath(bin));
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->sha256 : "";
}

// An attempt's environment record is what its worker process loaded and runs on: the LibTorch
// and BLAS libraries it names are mapped into the running cart-worker, its LibTorch version is
// the one these binaries were built against, its binary hash is the file's, and `cart runs show`
// lists it under the attempt.
TEST(LineageTest, AnAttemptsEnvironmentRecordIsWhatItsWorkerProcessLoaded) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("e.yaml", StrCat("name: e\nbase:\n", RunBase(data, 20), "seeds: [1]\n"))});
  const int64_t id = RunId(c, "e", 0);
  const pid_t worker = c.StartWorker("0");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const cart::v1::GetRunResponse run = c.GetRun(id);
        return run.attempts_size() > 0 && run.attempts(0).environment_size() > 0;
      },
      std::chrono::seconds(120)))
      << c.Log("worker-0.log");
  std::map<std::string, std::string> env;
  const cart::v1::GetRunResponse run = c.GetRun(id);
  for (const auto& item : run.attempts(0).environment()) env[item.key()] = item.value();
  std::ifstream in(StrCat("/proc/", worker, "/maps"));
  std::stringstream maps;
  maps << in.rdbuf();
  ASSERT_FALSE(maps.str().empty());
  EXPECT_THAT(maps.str(), HasSubstr(env["torch.library"]));
  // The BLAS: the library mapped into the worker (Debian's LibTorch calls the system's), or, in
  // a PyTorch wheel's LibTorch, MKL built into it.
  if (env["blas.library"].rfind("none mapped", 0) == 0) {
    EXPECT_EQ(env["blas.library"],
              StrCat("none mapped: built into LibTorch (", env["torch.blas"], ")"));
    EXPECT_EQ(maps.str().find("libopenblas"), std::string::npos);
  } else {
    EXPECT_THAT(maps.str(), HasSubstr(env["blas.library"]));
  }
  EXPECT_EQ(env["torch.version"], TORCH_VERSION);
  EXPECT_EQ(env["cart.binary_sha256"], Sha256File(BinDir() + "/cart-worker"));
  EXPECT_EQ(env["device"], "cpu");
  EXPECT_THAT(env["precision"], ::testing::StartsWith("fp32"));
  const std::string shown = c.Cart({"runs", "show", StrCat(id)});
  EXPECT_THAT(shown, HasSubstr("attempts (docs/architecture.md \"Environment records\"):"));
  EXPECT_THAT(shown, HasSubstr(StrCat("torch.version: ", TORCH_VERSION)));
  EXPECT_THAT(shown, HasSubstr(StrCat("blas.library: ", env["blas.library"])));
}

// A sweep's provenance at submit: the file's path and sha256 and, from a git checkout, its
// commit, branch, which tracked files differ and their diff, printed by `cart sweep show` (the
// diff with --diff); a file outside any checkout is submitted all the same and says so.
TEST(LineageTest, ASweepRecordsWhereItsFileCameFromAndTheCheckoutsDiff) {
  if (system("git --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no git on this machine";
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string repo = c.dir() + "/repo";
  fs::create_directories(repo);
  const std::string sweep = StrCat("name: g\nbase:\n", RunBase(data, 10), "seeds: [1]\n");
  {
    std::ofstream(repo + "/g.yaml") << sweep;
    std::ofstream(repo + "/notes.txt") << "baseline lr 3e-3\n";
  }
  const std::string git = StrCat("git -C ", repo, " ");
  ASSERT_EQ(system((git + "init -q -b main && " + git + "add g.yaml notes.txt && " + git +
                    "-c user.name=t -c user.email=t@example.com commit -q -m first")
                       .c_str()),
            0);
  std::ofstream(repo + "/notes.txt", std::ios::app) << "trying lr 1e-3 today\n";  // uncommitted
  c.Cart({"sweep", "submit", repo + "/g.yaml"});
  const std::string shown = c.Cart({"sweep", "show", "g"});
  char commit[41] = {0};
  FILE* head = popen((git + "rev-parse HEAD").c_str(), "r");
  ASSERT_NE(head, nullptr);
  ASSERT_EQ(fread(commit, 1, 40, head), 40u);
  pclose(head);
  EXPECT_THAT(shown, HasSubstr(StrCat("file.path: ", fs::canonical(repo).string(), "/g.yaml")));
  EXPECT_THAT(shown, HasSubstr(StrCat("git.commit: ", commit)));
  EXPECT_THAT(shown, HasSubstr("git.branch: main"));
  EXPECT_THAT(shown, HasSubstr("git.dirty: true"));
  EXPECT_THAT(shown, HasSubstr("git.changed: notes.txt"));
  EXPECT_THAT(shown, HasSubstr("file.git: tracked"));
  EXPECT_THAT(shown, HasSubstr("git diff: "));
  EXPECT_THAT(c.Cart({"sweep", "show", "g", "--diff"}), HasSubstr("+trying lr 1e-3 today"));
  // Outside any checkout: submitted, and the record says so.
  c.Cart({"sweep", "submit",
          c.WriteFile("h.yaml", StrCat("name: h\nbase:\n", RunBase(data, 10), "seeds: [1]\n"))});
  const std::string outside = c.Cart({"sweep", "show", "h"});
  EXPECT_THAT(outside, HasSubstr("git: not in a git checkout"));
  EXPECT_THAT(outside, HasSubstr("file.sha256: "));
}

// `cart runs diff`: two runs of one config on one worker are bit-identical at every logged step
// and differ in no config key, data file or environment item; a run with another learning rate
// differs in `lr` and its loss series parts from the first one's at the step the command names.
TEST(LineageTest, RunsDiffNamesWhatDiffersAndWhereTheLossSeriesPart) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string base = RunBase(data, 12);
  for (const char* name : {"d1", "d2"}) {
    c.Cart({"sweep", "submit",
            c.WriteFile(StrCat(name, ".yaml"),
                        StrCat("name: ", name, "\nbase:\n", base, "seeds: [1]\n"))});
  }
  std::string other = base;
  other.replace(other.find("lr: 3e-3"), 8, "lr: 1e-3");
  c.Cart({"sweep", "submit",
          c.WriteFile("d3.yaml", StrCat("name: d3\nbase:\n", other, "seeds: [1]\n"))});
  c.StartWorker("0");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        for (const char* sweep : {"d1", "d2", "d3"}) {
          const std::vector<cart::v1::RunView> runs = c.Runs(sweep);
          if (runs.empty() || runs[0].state() != cart::v1::RUN_STATE_SUCCEEDED) return false;
        }
        return true;
      },
      std::chrono::seconds(180)))
      << c.Log("worker-0.log");
  const std::string same = c.Cart({"runs", "diff", "d1/0", "d2/0"});
  EXPECT_THAT(same, HasSubstr("config: the same"));
  EXPECT_THAT(same, HasSubstr("data: the same files, the same sha256"));
  EXPECT_THAT(same, HasSubstr("environment (attempt 1 | attempt 1): the same"));
  EXPECT_THAT(same, HasSubstr("loss: bit-identical at all 12 steps both logged (through step 12)"));
  const std::string differs = c.Cart({"runs", "diff", "d1/0", "d3/0"});
  EXPECT_THAT(differs, HasSubstr("config (1 differ):\n  lr: 0.003 | 0.001"));
  // Step 1's loss is taken before the first update, the same for both: they part at step 2.
  EXPECT_THAT(differs, HasSubstr("loss: the series part at step 2 "));
  const nlohmann::json j =
      nlohmann::json::parse(c.Cart({"runs", "diff", "d1/0", "d3/0", "--json"}));
  EXPECT_EQ(j["series"]["first_different_step"], 2);
  EXPECT_EQ(j["config"].size(), 1u);
  // An unknown run is named.
  int code = 0;
  c.Cart({"runs", "diff", "d1/0", "nope/0"}, /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
}

// `cart reproduce`: a finished run trained again from its resolved config, bound to its data,
// ends bit-identical on the same worker and says so; a run that has not finished, or whose data
// file here is another build, is refused naming why (both sha256s for the file).
TEST(LineageTest, ReproduceTrainsARunAgainAndSaysItsLossesAreBitIdentical) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("r.yaml", StrCat("name: r\nbase:\n", RunBase(data, 12), "seeds: [5]\n"))});
  int code = 0;
  c.Cart({"reproduce", "r/0"}, /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0) << "a run that has not finished was reproduced";
  c.StartWorker("0");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const std::vector<cart::v1::RunView> runs = c.Runs("r");
        return !runs.empty() && runs[0].state() == cart::v1::RUN_STATE_SUCCEEDED;
      },
      std::chrono::seconds(120)));
  const std::string out =
      c.Cart({"reproduce", "r/0", "--name", "r-again", "--wait", "--timeout", "120"});
  EXPECT_THAT(out, HasSubstr("submitted sweep r-again"));
  EXPECT_THAT(out, HasSubstr("reproduced: the losses are bit-identical at all 12 steps"));
  EXPECT_THAT(out, HasSubstr("environment: the same"));
  EXPECT_THAT(c.Cart({"runs", "diff", "r/0", "r-again/0"}), HasSubstr("config: the same"));
  // Another build of the data file at the run's path: refused before anything is submitted.
  const std::string before = Sha256Of(data);
  c.SynthData(/*seed=*/4, data);
  const std::string after = Sha256Of(data);
  ASSERT_NE(before, after);
  const std::string refused =
      c.Cart({"reproduce", "r/0", "--name", "r-third"}, /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(refused, HasSubstr(StrCat("here has sha256 ", after, "; run")));
  EXPECT_THAT(refused, HasSubstr(StrCat("trained on sha256 ", before)));
  int listed = 0;
  c.Cart({"sweep", "show", "r-third"}, /*allow_failure=*/true, &listed);
  EXPECT_NE(listed, 0) << "a reproduction on another build of the data was submitted";
}

TEST(LineageTest, AWorkerWithAnotherFileAtTheRunsPathIsRefusedAndTheRunResumesExactlyOnItsOwn) {
  Cluster c(/*lease_ttl_s=*/2);
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string sha = Sha256Of(data);
  const std::string file =
      c.WriteFile("l.yaml", StrCat("name: l\nbase:\n", RunBase(data, 60, 10), "seeds: [7]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "l", 0);
  {
    // The client could read both files: the run is bound to them from the start.
    cart::v1::GetRunResponse resp = c.GetRun(run);
    const cart::v1::DataIdentity* train = Role(resp, "train");
    ASSERT_NE(train, nullptr);
    EXPECT_EQ(train->path(), data);
    EXPECT_EQ(train->sha256(), sha);
    EXPECT_EQ(train->tokens(), 40'000);
    EXPECT_EQ(train->size_bytes(), 80'000);
    EXPECT_EQ(train->recorded_by(), "submit");
    ASSERT_NE(Role(resp, "val:synth"), nullptr);
    EXPECT_FALSE(Role(resp, "val:synth")->sha256().empty());
  }
  pid_t a = c.StartWorker("a");
  ASSERT_TRUE(c.WaitForStepAndCheckpoint(run, 25)) << c.Log("worker-a.log");
  c.Signal(a, SIGKILL);
  c.Wait(a);

  // Worker b's box holds another build of the training file under the same path: same size,
  // other tokens, its own consistent metadata.
  fs::copy_file(data, c.dir() + "/kept.bin");
  fs::copy_file(data::MetadataPath(data), c.dir() + "/kept.json");
  data::SynthOptions o;
  o.chain.vocab = 32;
  o.chain.order = 1;
  o.chain.seed = 4;
  o.chain.concentration = 0.05;
  o.tokens = 40'000;
  o.val_tokens = 0;
  o.out = c.dir() + "/other/synth.bin";
  ASSERT_TRUE(data::WriteSynthetic(o).ok());
  fs::copy_file(o.out, data, fs::copy_options::overwrite_existing);
  fs::copy_file(data::MetadataPath(o.out), data::MetadataPath(data),
                fs::copy_options::overwrite_existing);
  const std::string other = Sha256Of(data);
  ASSERT_NE(other, sha);

  c.StartWorker("b");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "FAILED"; }, std::chrono::seconds(120)))
      << c.Log("worker-b.log") << c.Log("cartd.log");
  const std::string shown = c.Cart({"runs", "show", StrCat(run)});
  EXPECT_THAT(shown, HasSubstr(StrCat("data lineage: train file ", data,
                                      " is not the file this run was bound to (sha256 ", other,
                                      " here, ", sha, " recorded)")));
  EXPECT_THAT(shown, HasSubstr("recorded by submit"));
  // Refused before it trained: worker b never resumed the run nor logged a step.
  const std::string log = c.Cart({"runs", "logs", StrCat(run)});
  EXPECT_THAT(log, Not(HasSubstr("resuming from step")));
  EXPECT_LT(c.Series(run, "loss").rbegin()->first, 60);
  // The run's record still holds the submitted file.
  EXPECT_EQ(Role(c.GetRun(run), "train")->sha256(), sha);

  // The recorded file back in place: the run resumes from its checkpoint, exactly.
  fs::copy_file(c.dir() + "/kept.bin", data, fs::copy_options::overwrite_existing);
  fs::copy_file(c.dir() + "/kept.json", data::MetadataPath(data),
                fs::copy_options::overwrite_existing);
  c.Cart({"runs", "resume", StrCat(run)});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-b.log") << c.Log("cartd.log");
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(run)}),
              HasSubstr("data matches the run's record: train, val:synth"));
  ExpectStraightLosses(c, run, 60);
}

TEST(LineageTest, TheFirstWorkerRecordsWhatTheSubmitterCouldNotReadAndDerivedRunsInheritIt) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file = c.WriteFile(
      "d.yaml", StrCat("name: d\nbase:\n", RunBase(data, 12, 4), "seeds: [1]\n",
                       "derived:\n  - name: varR\n    from: {run: 0, checkpoint: final}\n"
                       "    eval_loops: [1, 2]\n"));
  // As from a laptop that cannot read the lab's data.
  c.Cart({"sweep", "submit", file, "--no-data-identity"});
  const int64_t parent = RunId(c, "d", 0);
  const int64_t eval = RunId(c, "d", 1);
  ASSERT_NE(Role(c.GetRun(parent), "train"), nullptr);
  EXPECT_EQ(Role(c.GetRun(parent), "train")->sha256(), "");
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(parent)}),
              HasSubstr(StrCat("train ", data, ": not recorded yet")));

  c.StartWorker("a");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, eval) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  const std::string sha = Sha256Of(data);
  const cart::v1::GetRunResponse p = c.GetRun(parent);
  ASSERT_NE(Role(p, "train"), nullptr);
  EXPECT_EQ(Role(p, "train")->sha256(), sha);
  EXPECT_EQ(Role(p, "train")->recorded_by(),
            StrCat("worker ", Cluster::WorkerId("a"), " (attempt 1)"));
  EXPECT_EQ(Role(p, "train")->tokenizer(), "synth:32");
  EXPECT_EQ(Role(p, "train")->tokenizer_sha256().size(), 64u);
  // The evaluation reads the parent's files: it took their identities, and checked its
  // validation file against them.
  const cart::v1::GetRunResponse e = c.GetRun(eval);
  ASSERT_NE(Role(e, "train"), nullptr);
  EXPECT_EQ(Role(e, "train")->sha256(), sha);
  EXPECT_EQ(Role(e, "train")->recorded_by(), StrCat("run ", parent, " (its parent)"));
  ASSERT_NE(Role(e, "val:synth"), nullptr);
  EXPECT_EQ(Role(e, "val:synth")->sha256(), Role(p, "val:synth")->sha256());
  // `cart data identify` prints the same identity.
  EXPECT_THAT(c.Cart({"data", "identify", data}), HasSubstr(StrCat("sha256 ", sha)));
  EXPECT_THAT(c.Cart({"data", "identify", "--sweep", file, "--json"}),
              HasSubstr(StrCat("\"sha256\":\"", sha, "\"")));
}

}  // namespace
}  // namespace cart::testing
