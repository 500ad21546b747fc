// Hugging Face interop (hf/: a run exported as a transformers model directory, and the
// lm-evaluation-harness run on one): the export.

#include "hf/export.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "data/tokenizer.h"
#include "hf/python_sources.h"
#include "model/safetensors.h"

namespace cart::hf {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What the tokenizer spec becomes in the directory.
struct TokenizerFiles {
  std::map<std::string, std::string> copies;  // file name in the directory -> source path
  json config;                                // tokenizer_config.json
  json special;                               // special_tokens_map.json
};

absl::StatusOr<TokenizerFiles> TokenizerFilesFor(const data::Tokenizer& tokenizer,
                                                 int64_t max_len) {
  const std::string spec = tokenizer.spec();
  TokenizerFiles t;
  t.config = {{"model_max_length", max_len},
              {"padding_side", "right"},
              {"add_bos_token", false},
              {"add_eos_token", false},
              {"clean_up_tokenization_spaces", false}};
  if (spec.rfind("gpt2:", 0) == 0) {
    // transformers' own GPT-2 tokenizer reads the same two files under its names.
    const std::string dir = spec.substr(5);
    t.copies = {{"vocab.json", dir + "/encoder.json"}, {"merges.txt", dir + "/vocab.bpe"}};
    const std::string eot = "<|endoftext|>";
    t.config.update({{"tokenizer_class", "GPT2Tokenizer"},
                     {"bos_token", eot},
                     {"eos_token", eot},
                     {"unk_token", eot},
                     {"add_prefix_space", false},
                     // Text that spells <|endoftext|> is text, as CART Lab encodes it.
                     {"split_special_tokens", true},
                     {"errors", "replace"}});
    t.special = {{"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}};
    return t;
  }
  if (spec == "bytes") {
    t.config.update(
        {{"tokenizer_class", "CartByteTokenizer"},
         {"auto_map", {{"AutoTokenizer", {"tokenization_cart.CartByteTokenizer", nullptr}}}},
         {"bos_token", "<s>"},
         {"eos_token", "</s>"}});
    t.special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    return t;
  }
  if (spec.size() > 6 && spec.compare(spec.size() - 6, 6, ".model") == 0) {
    t.copies = {{"tokenizer.model", spec}};
    t.config.update(
        {{"tokenizer_class", "CartSentencePieceTokenizer"},
         {"auto_map",
          {{"AutoTokenizer", {"tokenization_cart.CartSentencePieceTokenizer", nullptr}}}}});
    return t;
  }
  return absl::InvalidArgumentError(StrCat(
      "tokenizer ", spec,
      " cannot be exported: transformers has no tokenizer with its ids (a synthetic source's "
      "ids are not text). Allowed: bytes, a SentencePiece .model, gpt2:<dir>"));
}

json ConfigJson(const config::RunConfig& run, const data::Tokenizer& tokenizer) {
  const config::ModelConfig& m = run.model;
  json c = {
      {"model_type", "cart"},
      {"architectures", {"CartForCausalLM"}},
      {"auto_map",
       {{"AutoConfig", "configuration_cart.CartConfig"},
        {"AutoModelForCausalLM", "modeling_cart.CartForCausalLM"}}},
      {"model", std::string(config::ToString(m.model))},
      {"vocab_size", m.vocab},
      {"d", m.d},
      {"max_position_embeddings", run.train.seq_len},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings", true},
      // How CART Lab scored its zero-shot tasks: with BOS first or not (train.eval_bos).
      {"cart_eval_bos", run.train.eval_bos},
  };
  if (m.model == config::ModelKind::kDense) {
    c["layers"] = m.layers;
  } else {
    c.update({{"P", m.P},
              {"R", m.R},
              {"R_infer", m.R_infer},
              {"kv", std::string(config::ToString(m.kv))},
              {"core", std::string(config::ToString(m.core))},
              {"core_attn", std::string(config::ToString(m.core_attn))},
              {"hyper", m.hyper},
              {"lti", m.lti},
              {"lie", m.lie},
              {"cross_causal", m.cross_causal},
              {"gate", std::string(config::ToString(m.gate))}});
  }
  c["bos_token_id"] = tokenizer.bos_id() >= 0 ? json(tokenizer.bos_id()) : json(nullptr);
  c["eos_token_id"] = tokenizer.eos_id() >= 0 ? json(tokenizer.eos_id()) : json(nullptr);
  return c;
}

std::string ModelCard(const config::RunConfig& run, const HfExportRequest& request,
                      const std::string& tokenizer_spec) {
  const config::ModelConfig& m = run.model;
  std::string shape =
      m.model == config::ModelKind::kDense
          ? StrCat("dense baseline, ", m.layers, " layers, d = ", m.d)
          : StrCat("CART, d = ", m.d, ", P = ", m.P, ", R = ", m.R, " (kv ", config::ToString(m.kv),
                   ", core ", config::ToString(m.core), " ", config::ToString(m.core_attn),
                   ", gate ", config::ToString(m.gate), ")");
  return StrCat(
      "---\nlibrary_name: transformers\ntags:\n- cart\n- custom_code\n---\n\n# ", shape,
      "\n\nExported by CART Lab's `cart export --format hf` from ", request.source, " at step ",
      request.step, ", trained on ",
      run.data.train_data.empty() ? std::string("?") : run.data.train_data, " (tokenizer ",
      tokenizer_spec, ", ", run.train.seq_len, " tokens of context).\n\n",
      "CART is the Context-Anchored Recurrent Transformer (arXiv 2606.01495). The model code "
      "is in this directory, so load it with `trust_remote_code=True`:\n\n```python\n"
      "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
      "model = AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)\n"
      "tokenizer = AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)\n"
      "logits = model(input_ids, loops=8).logits  # loops at inference, 1..16\n```\n\n"
      "Evaluate it with lm-evaluation-harness: `lm_eval --model hf --model_args "
      "pretrained=DIR,trust_remote_code=True --tasks hellaswag`.\n");
}

}  // namespace

absl::Status ExportHfModel(model::LanguageModel& model, const config::RunConfig& config,
                           const HfExportRequest& request) {
  CART_ASSIGN_OR_RETURN(const torch::Dtype dtype, model::ExportDtype(request.dtype));
  const fs::path out(request.out_dir);
  std::error_code ec;
  if (fs::exists(out, ec)) {
    return absl::AlreadyExistsError(
        StrCat(request.out_dir, " exists; a model directory is written only to a new path"));
  }
  CART_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tokenizer,
                        data::Tokenizer::Load(request.tokenizer_spec));
  if (tokenizer->vocab_size() > config.model.vocab) {
    return absl::InvalidArgumentError(StrCat("tokenizer ", tokenizer->spec(), " has ",
                                             tokenizer->vocab_size(), " ids; the model has ",
                                             config.model.vocab));
  }
  CART_ASSIGN_OR_RETURN(TokenizerFiles tok, TokenizerFilesFor(*tokenizer, config.train.seq_len));

  const fs::path scratch = fs::path(out).concat(StrCat(".partial-", getpid()));
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) {
    return absl::NotFoundError(StrCat("the directory ", parent.string(), " (where ",
                                      request.out_dir, " would go) does not exist"));
  }
  fs::remove_all(scratch, ec);
  fs::create_directory(scratch, ec);  // the leaf only: a failure leaves nothing behind
  if (ec) {
    return absl::InternalError(StrCat("cannot create ", scratch.string(), ": ", ec.message()));
  }
  RemoveOnExit guard(scratch.string());
  const std::string into = scratch.string() + "/";

  json cfg = ConfigJson(config, *tokenizer);
  cfg["torch_dtype"] = dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  json generation = {
      {"do_sample", false},
      {"use_cache", config.model.model == config::ModelKind::kDense || config.model.cross_causal}};
  if (tokenizer->bos_id() >= 0) generation["bos_token_id"] = tokenizer->bos_id();
  if (tokenizer->eos_id() >= 0) {
    generation["eos_token_id"] = tokenizer->eos_id();
    generation["pad_token_id"] = tokenizer->eos_id();
  }
  CART_RETURN_IF_ERROR(WriteFileAtomically(into + "config.json", cfg.dump(2) + "\n"));
  CART_RETURN_IF_ERROR(
      WriteFileAtomically(into + "generation_config.json", generation.dump(2) + "\n"));
  CART_RETURN_IF_ERROR(
      WriteFileAtomically(into + "tokenizer_config.json", tok.config.dump(2) + "\n"));
  CART_RETURN_IF_ERROR(
      WriteFileAtomically(into + "special_tokens_map.json",
                          (tok.special.is_null() ? json::object() : tok.special).dump(2) + "\n"));
  for (const char* name : {"configuration_cart.py", "modeling_cart.py", "tokenization_cart.py"}) {
    CART_RETURN_IF_ERROR(WriteFileAtomically(into + name, PythonSource(name)));
  }
  for (const auto& [name, source] : tok.copies) {
    fs::copy_file(source, scratch / name, ec);
    if (ec) return absl::NotFoundError(StrCat("cannot copy ", source, ": ", ec.message()));
  }
  CART_RETURN_IF_ERROR(
      WriteFileAtomically(into + "README.md", ModelCard(config, request, tokenizer->spec())));
  std::map<std::string, std::string> metadata = request.metadata;
  metadata["format"] = "pt";  // what transformers requires of a safetensors checkpoint
  metadata["cart_source"] = request.source;
  metadata["cart_step"] = StrCat(request.step);
  CART_RETURN_IF_ERROR(
      model::SaveModel(model, (scratch / "model.safetensors").string(), dtype, metadata));

  fs::rename(scratch, out, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot move ", scratch.string(), " to ", request.out_dir, ": ", ec.message()));
  }
  guard.Release();
  return absl::OkStatus();
}

}  // namespace cart::hf
