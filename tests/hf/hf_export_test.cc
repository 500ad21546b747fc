// The Hugging Face export (hf/export.h) loaded by transformers, against CART Lab's own model:
// for every switch of docs/model.md §4 (and the dense baseline) a model with random weights is
// written as a model directory beside its logits at several loop counts, and
// tests/hf/check_hf_export.py loads each directory with AutoModelForCausalLM (trust_remote_code),
// compares the logits, decodes with and without the cache, and checks the tokenizers' ids on
// real text. Bad input: an existing directory, a tokenizer with no text form.

#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/strings.h"
#include "data/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hf/export.h"
#include "hf/harness.h"
#include "model/language_model.h"
#include "model/safetensors.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

// The largest relative error allowed between the two implementations' fp32 logits, against the
// largest logit (docs/huggingface.md "Equal logits").
constexpr double kTolerance = 1e-5;

bool HavePython() { return std::filesystem::exists(CART_HF_PYTHON); }

struct Variant {
  std::string name;
  std::string yaml;  // switches over the base config
};

const char kBase[] = "vocab: 258\nd: 128\nP: 2\nR: 3\nseq_len: 64\n";

std::vector<Variant> Variants() {
  return {
      {"default", ""},
      {"kv_recompute", "kv: recompute\n"},
      {"core_unshared", "core: unshared\n"},
      {"core_self", "core_attn: self\n"},
      {"unshared_self", "core: unshared\ncore_attn: self\n"},
      {"hyper_off", "hyper: off\n"},
      {"lti_off", "lti: off\n"},
      {"lie_off", "lie: off\n"},
      {"gate_delta", "gate: delta\n"},
      {"leak", "cross_causal: false\n"},
      {"all_off_delta", "hyper: off\nlti: off\nlie: off\ngate: delta\n"},
      {"R_infer_5", "R_infer: 5\n"},
      {"dense", "model: dense\nlayers: 3\n"},
  };
}

// A model of `config` whose every parameter is moved off its initial value by about its initial
// spread (a trained model's scale, not a chaotic one), the hyper-connection weights and the
// gate's a by more, so that every mixing weight and every channel's σ(a) differ.
std::shared_ptr<model::LanguageModel> RandomModel(const config::RunConfig& config) {
  auto built = model::BuildModel(config.model, 7);
  EXPECT_TRUE(built.ok()) << built.status();
  std::shared_ptr<model::LanguageModel> m = *built;
  torch::manual_seed(11);
  torch::NoGradGuard no_grad;
  for (const auto& item : m->named_parameters()) {
    const bool mixing = item.key() == "hyper.weights" || item.key() == "lti.a";
    item.value().add_(torch::randn_like(item.value()) * (mixing ? 0.5 : 0.02));
  }
  m->eval();
  return m;
}

// The loop counts a variant is checked at: its trained R, its R_infer, and others (an unshared
// core runs only R).
std::vector<int> LoopsFor(const config::ModelConfig& c) {
  if (c.model == config::ModelKind::kDense) return {0};
  if (c.core == config::CoreSharing::kUnshared) return {c.R};
  std::set<int> loops = {1, c.R, c.effective_R_infer(), 7, 16};
  return {loops.begin(), loops.end()};
}

TEST(HfExportTest, TransformersComputesCartsLogitsForEverySwitch) {
  if (!HavePython()) GTEST_SKIP() << CART_HF_PYTHON << " missing: run deploy/install-torch2.sh";
  TempDir dir;
  std::string dirs;
  for (const Variant& v : Variants()) {
    absl::StatusOr<config::RunConfig> config = config::ParseRunConfigYaml(kBase + v.yaml, v.name);
    ASSERT_TRUE(config.ok()) << config.status();
    std::shared_ptr<model::LanguageModel> m = RandomModel(*config);
    hf::HfExportRequest request;
    request.out_dir = dir.File(v.name);
    request.tokenizer_spec = "bytes";
    request.source = v.name;
    ASSERT_THAT(hf::ExportHfModel(*m, *config, request), IsOk());

    torch::manual_seed(3);
    const torch::Tensor ids = torch::randint(0, 258, {2, 40}, torch::kLong);
    std::vector<std::pair<std::string, torch::Tensor>> reference = {{"ids", ids}};
    torch::NoGradGuard no_grad;
    for (int loops : LoopsFor(config->model)) {
      model::ForwardOptions options;
      options.loops = loops;
      // "logits.0" is the model's default loop count (R_infer, else R; dense has none).
      reference.emplace_back(StrCat("logits.", loops), m->Forward(ids, options));
    }
    ASSERT_THAT(model::WriteSafetensors(dir.File(v.name + "/reference.safetensors"), reference, {}),
                IsOk());
    dirs += " " + dir.File(v.name);
  }
  CommandResult r = RunCommand(StrCat(CART_HF_PYTHON, " ", CART_SOURCE_DIR,
                                      "/tests/hf/check_hf_export.py ", kTolerance, dirs, " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The report names every directory, each with its measured error within the tolerance.
  const size_t json_start = r.output.find("[\n");
  ASSERT_NE(json_start, std::string::npos) << r.output;
  nlohmann::json reports = nlohmann::json::parse(r.output.substr(json_start));
  ASSERT_EQ(reports.size(), Variants().size());
  for (const nlohmann::json& report : reports) {
    EXPECT_TRUE(report["failures"].empty()) << report.dump();
    EXPECT_LE(report["max_relative_error"].get<double>(), kTolerance) << report.dump();
    std::cout << report["dir"].get<std::string>() << ": max relative error "
              << report["max_relative_error"].get<double>() << "\n";
  }
}

// Real English text: the State of the Union addresses (deploy/fetch-corpora.sh), line by line
// (a line holds up to a whole speech, 217 KB), and the cases where tokenizers differ most (leading,
// repeated and trailing spaces, tabs, new lines, non-ASCII, text that spells a special token).
std::vector<std::string> Texts() {
  std::vector<std::string> texts = {"  double  spaces",
                                    " lead",
                                    "trail ",
                                    "tab\there",
                                    "\n\nnew lines\n",
                                    "ünïcödé ☃ 漢字 🙂",
                                    "Question: x\nAnswer:",
                                    " Answer",
                                    "<s> and </s> and <|endoftext|> as text",
                                    "a"};
  const std::string sotu = ReadFile(std::string(CART_SOURCE_DIR) + "/var/corpora/sotu/sotu.txt");
  size_t start = 0;
  while (texts.size() < 400 && start < sotu.size()) {
    size_t end = sotu.find('\n', start);
    if (end == std::string::npos) end = sotu.size();
    const std::string line = sotu.substr(start, end - start);
    if (!line.empty() && line != "<|endoftext|>") texts.push_back(line);  // not the separators
    start = end + 1;
  }
  return texts;
}

// Writes a small model with `spec`'s tokenizer and, beside it, the ids cart gives each text.
void ExportWithTokenizerIds(const std::string& spec, const std::string& out) {
  absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer = data::Tokenizer::Load(spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<config::RunConfig> config = config::ParseRunConfigYaml(
      StrCat("vocab: ", (*tokenizer)->vocab_size(), "\nd: 64\nP: 1\nR: 2\nseq_len: 64\n"), spec);
  ASSERT_TRUE(config.ok()) << config.status();
  std::shared_ptr<model::LanguageModel> m = RandomModel(*config);
  hf::HfExportRequest request;
  request.out_dir = out;
  request.tokenizer_spec = spec;
  ASSERT_THAT(hf::ExportHfModel(*m, *config, request), IsOk());
  nlohmann::json cases = nlohmann::json::array();
  for (const std::string& text : Texts()) {
    cases.push_back({{"text", text}, {"ids", (*tokenizer)->Encode(text)}});
  }
  WriteFile(out + "/tokenizer_ids.json", cases.dump());
  torch::manual_seed(3);
  const torch::Tensor ids = torch::randint(0, (*tokenizer)->vocab_size(), {1, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  ASSERT_THAT(model::WriteSafetensors(out + "/reference.safetensors",
                                      {{"ids", ids}, {"logits.2", m->Forward(ids)}}, {}),
              IsOk());
}

TEST(HfExportTest, TokenizersGiveCartsIdsOnRealText) {
  if (!HavePython()) GTEST_SKIP() << CART_HF_PYTHON << " missing: run deploy/install-torch2.sh";
  const std::string corpora = std::string(CART_SOURCE_DIR) + "/var/corpora";
  if (!std::filesystem::exists(corpora + "/gpt2/encoder.json") ||
      !std::filesystem::exists(corpora + "/sotu/sotu.txt")) {
    GTEST_SKIP() << "no GPT-2 files or SOTU text under " << corpora
                 << "; deploy/fetch-corpora.sh fetches them (make test-deps runs it)";
  }
  TempDir dir;
  // A SentencePiece model trained here as `cart data tokenizer train` trains one.
  CommandResult sp =
      RunCart(StrCat("data tokenizer train ", corpora, "/sotu/sotu.txt --vocab 2000 ",
                     "--max-sentences 20000 --out ", dir.File("sotu.model")));
  ASSERT_EQ(sp.exit_code, 0) << sp.output;
  ExportWithTokenizerIds("bytes", dir.File("bytes"));
  ExportWithTokenizerIds(dir.File("sotu.model"), dir.File("sentencepiece"));
  ExportWithTokenizerIds("gpt2:" + corpora + "/gpt2", dir.File("gpt2"));
  CommandResult r = RunCommand(
      StrCat(CART_HF_PYTHON, " ", CART_SOURCE_DIR, "/tests/hf/check_hf_export.py ", kTolerance, " ",
             dir.File("bytes"), " ", dir.File("sentencepiece"), " ", dir.File("gpt2"), " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t json_start = r.output.find("[\n");
  ASSERT_NE(json_start, std::string::npos) << r.output;
  nlohmann::json reports = nlohmann::json::parse(r.output.substr(json_start));
  ASSERT_EQ(reports.size(), 3u);
  const std::vector<std::string> classes = {"CartByteTokenizer", "CartSentencePieceTokenizer",
                                            "GPT2Tokenizer"};
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i]["tokenizer"], classes[i]) << reports[i].dump();
    EXPECT_GE(reports[i]["texts"].get<int>(), 200) << reports[i].dump();
    EXPECT_EQ(reports[i]["texts_mismatched"].get<int>(), 0) << reports[i].dump();
  }
}

TEST(HfExportTest, RefusesAnExistingDirectoryAndATokenizerWithoutText) {
  absl::StatusOr<config::RunConfig> config =
      config::ParseRunConfigYaml("vocab: 258\nd: 64\nP: 1\nR: 2\n", "test");
  ASSERT_TRUE(config.ok());
  std::shared_ptr<model::LanguageModel> m = RandomModel(*config);
  TempDir dir;
  hf::HfExportRequest request;
  request.tokenizer_spec = "bytes";
  request.out_dir = dir.File("exists");
  std::filesystem::create_directories(request.out_dir);
  WriteFile(request.out_dir + "/keep.txt", "mine");
  EXPECT_THAT(hf::ExportHfModel(*m, *config, request),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("exists")));
  EXPECT_EQ(ReadFile(request.out_dir + "/keep.txt"), "mine");  // untouched

  request.out_dir = dir.File("synth");
  request.tokenizer_spec = "synth:64";
  EXPECT_THAT(hf::ExportHfModel(*m, *config, request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("transformers has no tokenizer with its ids")));
  request.tokenizer_spec = "gpt2:" + dir.File("nowhere");
  EXPECT_THAT(hf::ExportHfModel(*m, *config, request),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere")));
  request.tokenizer_spec = "bytes";
  request.dtype = "fp16";
  EXPECT_THAT(hf::ExportHfModel(*m, *config, request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fp32, bf16")));
  // No partial directory is left behind by any refusal.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), "exists") << entry.path();
  }
}

// The harness runner refuses what it cannot run, saying what to do: a Python that is not there,
// one without lm-eval, and (with the pinned one) a task the harness does not have.
TEST(HarnessTest, APythonWithoutLmEvalAndAnUnknownTaskAreNamed) {
  TempDir dir;
  hf::HarnessRequest request;
  request.model_dir = dir.File("model");
  request.work_dir = dir.File("work");
  request.tasks = {{"hellaswg", "", "", "", 0}};
  request.python = dir.File("no-such-python");
  EXPECT_THAT(hf::RunHarness(request),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no-such-python")));
  request.python = "/usr/bin/python3";  // Debian's, without lm-eval
  EXPECT_THAT(hf::RunHarness(request),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("install-torch2.sh")));
  if (!HavePython()) GTEST_SKIP() << CART_HF_PYTHON << " missing: run deploy/install-torch2.sh";
  request.python = CART_HF_PYTHON;
  EXPECT_THAT(hf::RunHarness(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lm-eval has no task 'hellaswg'; close names: hellaswag")));
}

}  // namespace
}  // namespace cart::testing
