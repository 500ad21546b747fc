// Sweeps that ask for lm-evaluation-harness (docs/huggingface.md "Harness tasks in sweeps"): a
// real cartd and cart-worker, whose --python is the pinned environment with transformers and
// lm-eval. One trained run is evaluated twice on the same local task files, in their published
// formats: by CART Lab's scorer, and with `lm_eval` naming the tasks, by the harness on the
// checkpoint exported as a Hugging Face model directory. Both store the same metrics and per-item
// outcomes, so `cart report` reads either; a task the harness does not have fails its job, named.

#include <cmath>
#include <filesystem>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

TEST(HarnessJobTest, AnEvalJobNamingLmEvalTasksStoresWhatCartsScorerStores) {
  if (!std::filesystem::exists(CART_HF_PYTHON)) {
    GTEST_SKIP() << CART_HF_PYTHON << " missing: run deploy/install-torch2.sh";
  }
  Cluster c;
  c.StartCartd();
  const std::vector<std::pair<std::string, std::string>> eats = {
      {"cat", "fish"}, {"dog", "meat"}, {"cow", "grass"}, {"bird", "seeds"}};
  std::string text, lambada, piqa, hellaswag;
  for (int i = 0; i < 400; ++i) {
    const auto& [animal, food] = eats[(i * 7) % eats.size()];
    text += "the " + animal + " eats " + food + ".\n";
  }
  for (size_t i = 0; i < eats.size(); ++i) {
    const auto& [animal, food] = eats[i];
    lambada += StrCat(R"({"text": "the )", animal, " eats ", food, R"("})", "\n");
    piqa += StrCat(R"({"goal": "the )", animal, R"( eats", "sol1": ")",
                   eats[(i + 1) % eats.size()].second, R"(", "sol2": ")", food, R"("})", "\n");
    hellaswag +=
        StrCat(R"({"activity_label": "Eating", "ctx_a": "the )", animal,
               R"( eats", "ctx_b": "", "endings": ["fish.", "meat.", "grass.", "seeds."],)",
               R"( "label": )", i, "}\n");
  }
  c.WriteFile("eats.txt", text);
  const std::string lambada_file = c.WriteFile("lambada_test.jsonl", lambada);
  const std::string piqa_file = c.WriteFile("valid.jsonl", piqa);
  c.WriteFile("valid-labels.lst", "1\n1\n1\n1\n");
  const std::string hellaswag_file = c.WriteFile("hellaswag_val.jsonl", hellaswag);
  const std::string data = c.dir() + "/eats.bin";
  c.Cart({"data", "prepare", c.dir() + "/eats.txt", "--format", "lines", "--out", data});
  const std::string file = c.WriteFile(
      "h.yaml",
      StrCat("name: h\nbase:\n  vocab: 258\n  d: 64\n  P: 1\n  R: 2\n  seq_len: 32\n  batch: 4\n"
             "  lr: 1e-2\n  warmup: 3\n  eval_every: 0\n  threads: 1\n  steps: 30\n"
             "  checkpoint_every: 30\n  train_data: ",
             data, "\n  tasks:\n    lambada: lambada=", lambada_file,
             "\n    piqa: piqa=", piqa_file, "\n    hellaswag: hellaswag=", hellaswag_file,
             "\nseeds: [1]\nderived:\n"
             "  - name: ours\n    from: {run: 0, checkpoint: final}\n    eval_loops: [1, 2]\n"
             "  - name: harness\n    from: {run: 0, checkpoint: final}\n    eval_loops: [1, 2]\n"
             "    set: {lm_eval: 'lambada,piqa,hellaswag'}\n"
             "  - name: unknown\n    from: {run: 0, checkpoint: final}\n    eval_loops: [2]\n"
             "    set: {lm_eval: no_such_task_xyz}\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t ours = RunId(c, "h", 1), harness = RunId(c, "h", 2), unknown = RunId(c, "h", 3);
  ASSERT_GT(ours, 0);
  ASSERT_GT(harness, 0);
  ASSERT_GT(unknown, 0);
  c.StartWorker("a", 0, {"--python", CART_HF_PYTHON});
  auto state = [&](int64_t id) { return c.GetRun(id).run().state(); };
  ASSERT_TRUE(c.WaitFor(
      [&] {
        return state(ours) == cart::v1::RUN_STATE_SUCCEEDED &&
               state(harness) == cart::v1::RUN_STATE_SUCCEEDED &&
               state(unknown) == cart::v1::RUN_STATE_FAILED;
      },
      std::chrono::seconds(420)))
      << c.Log("worker-a.log");

  // The same metrics at both loop counts: accuracies equal, perplexities within float noise.
  int compared = 0;
  for (const std::string task : {"lambada", "piqa", "hellaswag"}) {
    for (const std::string kind : {"task_acc/", "task_acc_norm/", "task_ppl/"}) {
      const std::map<int64_t, double> a = c.Series(ours, kind + task);
      const std::map<int64_t, double> b = c.Series(harness, kind + task);
      if (kind == "task_ppl/" && task != "lambada") continue;
      if (kind == "task_acc_norm/" && task == "lambada") continue;
      ASSERT_EQ(a.size(), 2u) << kind << task;
      ASSERT_EQ(b.size(), 2u) << kind << task << "\n" << c.Log("worker-a.log");
      for (const auto& [loops, value] : a) {
        if (kind == "task_ppl/") {
          EXPECT_NEAR(b.at(loops), value, 1e-4 * value) << kind << task << " at " << loops;
        } else {
          EXPECT_DOUBLE_EQ(b.at(loops), value) << kind << task << " at " << loops;
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12);  // acc and ppl or acc_norm of 3 tasks at 2 loop counts

  // And the same per-item outcomes, item by item.
  auto items = [&](int64_t run) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + c.user_token());
    cart::v1::GetEvalItemsRequest req;
    req.set_run_id(run);
    cart::v1::GetEvalItemsResponse response;
    EXPECT_TRUE(c.stub().GetEvalItems(&ctx, req, &response).ok());
    std::map<std::string, std::string> out;
    for (const cart::v1::EvalItems& e : response.tasks()) {
      std::string logprobs;  // LAMBADA's, to 4 decimals: within float noise of each other
      for (double lp : e.logprob()) logprobs += StrCat(" ", std::round(lp * 1e4) / 1e4);
      out[StrCat(e.task(), "@", e.loops())] = e.correct() + "/" + e.correct_norm() + logprobs;
    }
    return out;
  };
  const std::map<std::string, std::string> ours_items = items(ours);
  EXPECT_EQ(ours_items.size(), 6u);
  EXPECT_EQ(items(harness), ours_items);

  // `cart export --format hf` of the trained run from cartd: the model directory with the same
  // tensors as the safetensors export of that run; refused for a run without a checkpoint (the
  // evaluation) and for a directory that exists, leaving nothing behind.
  const int64_t trained = RunId(c, "h", 0);
  const std::string hf_dir = c.dir() + "/hf-export", st = c.dir() + "/run0.safetensors";
  EXPECT_THAT(c.Cart({"export", StrCat(trained), "--format", "hf", "--out", hf_dir}),
              ::testing::HasSubstr("Hugging Face model directory"));
  c.Cart({"export", StrCat(trained), "--out", st});
  EXPECT_NE(ReadFile(hf_dir + "/config.json").find("\"model_type\": \"cart\""), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(hf_dir + "/modeling_cart.py"));
  const std::string exported = ReadFile(hf_dir + "/model.safetensors");
  const std::string plain = ReadFile(st);
  // The same tensors: each file's data section ends both files, in the same name order.
  ASSERT_GT(exported.size(), 100000u);
  const size_t data_start = 8 + static_cast<size_t>(static_cast<unsigned char>(plain[0])) +
                            (static_cast<size_t>(static_cast<unsigned char>(plain[1])) << 8) +
                            (static_cast<size_t>(static_cast<unsigned char>(plain[2])) << 16);
  EXPECT_EQ(exported.substr(exported.size() - (plain.size() - data_start)),
            plain.substr(data_start));
  int code = 0;
  const std::string refused =
      c.Cart({"export", StrCat(ours), "--format", "hf", "--out", c.dir() + "/hf-eval"},
             /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  EXPECT_FALSE(std::filesystem::exists(c.dir() + "/hf-eval"));
  c.Cart({"export", StrCat(trained), "--format", "hf", "--out", hf_dir}, true, &code);
  EXPECT_NE(code, 0);
  EXPECT_TRUE(std::filesystem::exists(hf_dir + "/config.json"));  // the first export untouched

  // A task lm-eval does not have fails its job, named.
  bool named = false;
  const cart::v1::GetRunResponse failed = c.GetRun(unknown);
  for (const cart::v1::RunEvent& e : failed.events()) {
    if (e.why().find("lm-eval has no task 'no_such_task_xyz'") != std::string::npos) named = true;
  }
  EXPECT_TRUE(named) << c.Log("worker-a.log");
}

}  // namespace
}  // namespace cart::testing
