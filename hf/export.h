#pragma once

// A model as a Hugging Face transformers model directory (docs/huggingface.md): what
// `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` and
// `AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)` load, and what lm-evaluation-harness
// scores with `--model hf --model_args pretrained=DIR,trust_remote_code=True`:
//
//   config.json              model_type "cart", every switch of docs/model.md §4 under its §9
//                            name, R (the loops it was trained with), R_infer, auto_map
//   configuration_cart.py    the config class  } this project's PyTorch implementation
//   modeling_cart.py         the model         } (hf/python/), written into the directory
//   model.safetensors        every parameter under its docs/model.md §8 name (cart export's)
//   generation_config.json   BOS/EOS ids, whether decoding may keep a cache
//   tokenizer files          GPT-2 BPE: vocab.json + merges.txt for transformers' own GPT-2
//                            tokenizer; SentencePiece: tokenizer.model, bytes: nothing, each read
//                            by tokenization_cart.py; tokenizer_config.json and
//                            special_tokens_map.json for all
//   README.md                a model card: where the weights come from and how to load them
//
// No Python runs here: the files are written from the model and the tokenizer spec alone.

#include <map>
#include <string>

#include "absl/status/status.h"
#include "config/config.h"
#include "model/language_model.h"

namespace cart::hf {

struct HfExportRequest {
  std::string out_dir;         // must not exist; written whole or not at all
  std::string tokenizer_spec;  // data/tokenizer.h spec: bytes, *.model, gpt2:<dir>
  std::string dtype = "fp32";  // weights as fp32 or bf16
  std::string source;          // what the model card calls the origin ("run 12 (stage1/3)")
  int64_t step = 0;            // the checkpoint's step, for the model card and metadata
  std::map<std::string, std::string> metadata;  // added to model.safetensors' __metadata__
};

// Writes `model` (trained with `config`) as a model directory at request.out_dir, first into a
// sibling scratch directory that is renamed into place at the end, so an error leaves nothing at
// out_dir. Errors: AlreadyExists when out_dir exists; NotFound when its parent does not;
// InvalidArgument for a dtype other than fp32/bf16, a tokenizer transformers cannot be given with
// the same ids (synth:N, whose ids have no text) or one with more ids than the model; the
// tokenizer's errors (NotFound for a missing file); file system errors naming the path.
absl::Status ExportHfModel(model::LanguageModel& model, const config::RunConfig& config,
                           const HfExportRequest& request);

}  // namespace cart::hf
