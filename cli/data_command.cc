// cart data tokenizer train|encode, prepare, synth, info — corpora, tokenizers and token files
// (data/).

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/lineage.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "data/corpus.h"
#include "data/identity.h"
#include "data/prepare.h"
#include "data/synth.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace cart::cli {
namespace {

using data::CorpusFormat;
using data::CorpusInput;

void PrintFile(const std::string& label, const std::string& path, const data::TokenFileInfo& info,
               int64_t documents) {
  std::cout << fmt::format("{:<6} {}  {} tokens", label, path, Thousands(info.tokens));
  if (documents >= 0) std::cout << fmt::format(", {} documents", Thousands(documents));
  std::cout << fmt::format(", {}, sha256 {}\n", info.dtype, info.sha256.substr(0, 16));
}

absl::StatusOr<std::vector<CorpusInput>> MakeInputs(const std::vector<std::string>& paths,
                                                    const std::string& format,
                                                    const std::string& text_field) {
  CART_ASSIGN_OR_RETURN(CorpusFormat f, data::ParseCorpusFormat(format));
  std::vector<CorpusInput> inputs;
  for (const std::string& p : paths) inputs.push_back(CorpusInput{p, f, text_field});
  return inputs;
}

struct TrainArgs {
  std::vector<std::string> inputs;
  std::string format = "auto";
  std::string text_field = "text";
  std::string out;
  data::SentencePieceTrainOptions options;
};

void RunTokenizerTrain(const TrainArgs& a) {
  auto inputs = MakeInputs(a.inputs, a.format, a.text_field);
  if (!inputs.ok()) ExitWith(inputs.status());
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = data::TrainSentencePiece(*inputs, a.options, a.out);
  if (!st.ok()) ExitWith(st);
  auto tok = data::Tokenizer::Load(a.out);
  if (!tok.ok()) ExitWith(tok.status());
  std::cout << fmt::format(
      "wrote {}  vocab {}, bos {}, eos {} ({:.1f} s)\n", (*tok)->spec(), (*tok)->vocab_size(),
      (*tok)->bos_id(), (*tok)->eos_id(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

struct EncodeArgs {
  std::string tokenizer = "bytes";
  std::vector<std::string> text;
};

void RunTokenizerEncode(const EncodeArgs& a) {
  auto tok = data::Tokenizer::Load(a.tokenizer);
  if (!tok.ok()) ExitWith(tok.status());
  const std::string text = StrJoin(a.text, " ");
  const std::vector<int64_t> ids = (*tok)->Encode(text);
  std::cout << StrJoin(ids, " ") << "\n";
  std::cerr << fmt::format(
      "{} tokens for {} bytes; decodes {}\n", ids.size(), text.size(),
      (*tok)->Decode(ids) == text ? "back to the same text" : "to different text");
}

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string format = "auto";
  std::string text_field = "text";
  std::string tokenizer = "bytes";
  std::string out;
  std::vector<std::string> val;
  uint64_t seed = 0;
  int threads = 0;
  std::string mix;
  int64_t chunk_tokens = 0;
  int64_t tokens = 0;
  std::vector<std::string> sources;     // --source NAME=PATH
  std::vector<std::string> weights;     // --weight NAME=W
  std::vector<std::string> max_tokens;  // --max-tokens NAME=N
  bool dry_run = false;
};

// "300000000", "300M", "1.5B", "64k": a token count. InvalidArgument naming `what`.
absl::StatusOr<int64_t> ParseCount(std::string_view text, const std::string& what) {
  const std::string t(Trim(text));
  double scale = 1;
  std::string digits = t;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k':
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      default:
        break;
    }
    if (scale != 1) digits.pop_back();
  }
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (digits.empty() || end != digits.c_str() + digits.size() || !(v >= 0) || v * scale > 9e18) {
    return absl::InvalidArgumentError(
        StrCat(what, ": '", t, "' is not a count (e.g. 300000000, 300M, 1.5B, 64k)"));
  }
  return static_cast<int64_t>(v * scale + 0.5);
}

// Splits "NAME=VALUE" of `flag`; InvalidArgument naming the flag.
absl::StatusOr<std::pair<std::string, std::string>> NameValue(const std::string& text,
                                                              const char* flag) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return absl::InvalidArgumentError(StrCat(flag, " \"", text, "\": expected NAME=VALUE"));
  }
  return std::make_pair(text.substr(0, eq), text.substr(eq + 1));
}

absl::StatusOr<data::SourceMixtureOptions> SourceOptions(const PrepareArgs& a) {
  data::SourceMixtureOptions o;
  o.tokenizer = a.tokenizer;
  o.out = a.out;
  o.threads = a.threads;
  o.max_tokens = a.tokens;
  o.chunk_tokens = a.chunk_tokens == 0 ? data::kDefaultMixChunkTokens : a.chunk_tokens;
  CART_ASSIGN_OR_RETURN(CorpusFormat format, data::ParseCorpusFormat(a.format));
  const auto find = [&o](const std::string& name) -> data::CorpusSource* {
    for (data::CorpusSource& s : o.sources) {
      if (s.name == name) return &s;
    }
    return nullptr;
  };
  for (const std::string& text : a.sources) {  // a name given again adds inputs to it
    CART_ASSIGN_OR_RETURN(auto nv, NameValue(text, "--source"));
    data::CorpusSource* s = find(nv.first);
    if (s == nullptr) s = &o.sources.emplace_back(data::CorpusSource{nv.first, {}, 1, 0});
    s->inputs.push_back(CorpusInput{nv.second, format, a.text_field});
  }
  for (const auto& [flag, list] :
       {std::pair<const char*, const std::vector<std::string>*>{"--weight", &a.weights},
        {"--max-tokens", &a.max_tokens}}) {
    for (const std::string& text : *list) {
      CART_ASSIGN_OR_RETURN(auto nv, NameValue(text, flag));
      data::CorpusSource* s = find(nv.first);
      if (s == nullptr) {
        return absl::InvalidArgumentError(
            StrCat(flag, " ", text, ": no --source named '", nv.first, "'"));
      }
      CART_ASSIGN_OR_RETURN(int64_t n, ParseCount(nv.second, StrCat(flag, " ", nv.first)));
      (std::string_view(flag) == "--weight" ? s->weight : s->max_tokens) = n;
    }
  }
  return o;
}

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} kB", bytes / 1e3);
}

void RunSourceMixture(const PrepareArgs& a) {
  if (!a.inputs.empty() || !a.mix.empty() || !a.val.empty()) {
    ExitWith(absl::InvalidArgumentError(
        "--source makes the mixture from corpora: give no input files, --mix or --val with it "
        "(prepare validation sets on their own)"));
  }
  absl::StatusOr<data::SourceMixtureOptions> options = SourceOptions(a);
  if (!options.ok()) ExitWith(options.status());
  if (a.dry_run) {
    constexpr uint64_t kSample = 8 << 20;
    auto plan = data::PlanSourceMixture(*options, kSample);
    if (!plan.ok()) ExitWith(plan.status());
    Table t;
    t.Header({"source", "weight", "files", "on disk", "sample", "tokens", "cap", "gives"});
    for (size_t i = 0; i < options->sources.size(); ++i) {
      const data::CorpusSource& s = options->sources[i];
      const data::SourceEstimate& e = plan->estimates[i];
      t.Row({s.name, std::to_string(s.weight), std::to_string(e.files), Bytes(e.input_bytes),
             fmt::format("{} docs, {}", Thousands(e.sampled_documents), Bytes(e.sampled_bytes)),
             (e.exact ? "" : "≈ ") + Thousands(e.tokens),
             s.max_tokens > 0 ? Thousands(s.max_tokens) : "-", Thousands(plan->tokens[i])});
    }
    t.Print(std::cout);
    std::cout << fmt::format(
        "mixture {}: ≈ {} tokens in chunks of {}; disk ≈ {} ({} bytes a token: the sources' "
        "files and the mixture)\n(dry run: token counts estimated from the first {} MB of "
        "each source's text; nothing written)\n",
        a.out, Thousands(plan->mixture_tokens), options->chunk_tokens, Bytes(plan->disk_bytes),
        plan->bytes_per_token, kSample >> 20);
    return;
  }
  ProgressBar bar("prepare");
  options->progress = [&bar](const std::string& source, const data::PrepareProgress& p) {
    bar.Update(p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 0.0,
               fmt::format("{}: {:.1f}/{:.1f} MB {} docs {} tokens", source, p.bytes_done / 1e6,
                           p.bytes_total / 1e6, Thousands(p.documents), Thousands(p.tokens)),
               false);
  };
  const auto start = std::chrono::steady_clock::now();
  auto result = data::PrepareSourceMixture(*options);
  if (!result.ok()) ExitWith(result.status());
  for (size_t i = 0; i < result->sources.size(); ++i) {
    const data::PreparedSource& s = result->sources[i];
    PrintFile(options->sources[i].name, s.file.path, s.file.info, s.file.documents);
    if (s.capped) std::cout << "       (stopped at its --max-tokens)\n";
  }
  PrintFile("mix", a.out, result->mixture, -1);
  std::cout << fmt::format(
      "tokenizer {} (vocab {}), {:.1f} s\n", result->mixture.tokenizer, result->mixture.vocab,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void RunMix(const PrepareArgs& a) {
  if (!a.inputs.empty()) {
    ExitWith(absl::InvalidArgumentError("give input files or --mix, not both"));
  }
  if (!a.val.empty()) {
    ExitWith(absl::InvalidArgumentError(
        "--val does not apply to --mix: hold validation sets out when preparing each source"));
  }
  auto sources = data::ParseMixSpec(a.mix);
  if (!sources.ok()) ExitWith(sources.status());
  // 0: not given on the command line.
  const int64_t chunk = a.chunk_tokens == 0 ? data::kDefaultMixChunkTokens : a.chunk_tokens;
  if (chunk < 1) {
    ExitWith(absl::InvalidArgumentError(StrCat("--chunk-tokens ", chunk,
                                               " out of range; allowed: >= 1 (default ",
                                               data::kDefaultMixChunkTokens, ")")));
  }
  data::MixOptions options{*sources, chunk, a.out, a.tokens};
  auto info = data::BuildMixture(options);
  if (!info.ok()) ExitWith(info.status());
  PrintFile("mix", a.out, *info, -1);
  for (const std::string& s : info->sources) std::cout << "  " << s << "\n";
}

void RunPrepare(const PrepareArgs& a) {
  if (!a.sources.empty()) return RunSourceMixture(a);
  if (!a.weights.empty() || !a.max_tokens.empty() || a.dry_run) {
    ExitWith(absl::InvalidArgumentError("--weight, --max-tokens and --dry-run go with --source"));
  }
  if (!a.mix.empty()) return RunMix(a);
  if (a.tokens != 0 || a.chunk_tokens != 0) {
    ExitWith(absl::InvalidArgumentError("--tokens and --chunk-tokens apply to --mix only"));
  }
  data::PrepareOptions options;
  auto inputs = MakeInputs(a.inputs, a.format, a.text_field);
  if (!inputs.ok()) ExitWith(inputs.status());
  options.inputs = *inputs;
  options.tokenizer = a.tokenizer;
  options.out = a.out;
  options.seed = a.seed;
  options.threads = a.threads;
  for (const std::string& v : a.val) {
    auto h = data::ParseHoldout(v);
    if (!h.ok()) ExitWith(h.status());
    options.holdouts.push_back(*h);
  }
  ProgressBar bar("prepare");
  data::PrepareProgress last;
  const auto draw = [&bar](const data::PrepareProgress& p, bool force) {
    const double secs = bar.seconds();
    bar.Update(p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 0.0,
               fmt::format("{:.1f}/{:.1f} MB {:.2f} MB/s {} docs {} tokens", p.bytes_done / 1e6,
                           p.bytes_total / 1e6, secs > 0 ? p.bytes_done / 1e6 / secs : 0.0,
                           Thousands(p.documents), Thousands(p.tokens)),
               force);
  };
  options.progress = [&](const data::PrepareProgress& p) {
    last = p;
    draw(p, false);
  };
  const auto start = std::chrono::steady_clock::now();
  auto result = data::Prepare(options);
  if (result.ok()) draw(last, /*force=*/true);
  if (!result.ok()) ExitWith(result.status());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintFile("train", result->train.path, result->train.info, result->train.documents);
  for (const data::PreparedFile& h : result->holdouts) {
    PrintFile("val", h.path, h.info, h.documents);
  }
  std::cout << fmt::format("tokenizer {} (vocab {}), {:.1f} s\n", result->train.info.tokenizer,
                           result->train.info.vocab, secs);
}

struct SynthArgs {
  data::SynthOptions options;
};

void RunSynth(const SynthArgs& a) {
  auto result = data::WriteSynthetic(a.options);
  if (!result.ok()) ExitWith(result.status());
  PrintFile("train", a.options.out, result->train, -1);
  if (!result->val_path.empty()) PrintFile("val", result->val_path, result->val, -1);
  std::cout << fmt::format("entropy rate {:.12f} nats/token ({:.6f} bits/token)\n",
                           *result->train.entropy_rate_nats,
                           *result->train.entropy_rate_nats / std::log(2.0));
}

struct InfoArgs {
  std::string path;
  bool verify = false;
  bool json = false;
  int64_t head = 0;
};

void RunInfo(const InfoArgs& a) {
  auto file = data::TokenFile::Open(a.path);
  if (!file.ok()) ExitWith(file.status());
  const data::TokenFileInfo& info = file->info();
  if (a.verify) {
    absl::Status st = file->Verify();
    if (!st.ok()) ExitWith(st);
  }
  if (a.json) {
    std::cout << data::TokenFileInfoToJson(info);
  } else {
    const auto row = [](const std::string& k, const std::string& v) {
      std::cout << fmt::format("{:<18}{}\n", k, v);
    };
    row("file", a.path);
    row("tokenizer", info.tokenizer);
    row("vocab", Thousands(info.vocab));
    row("tokens", Thousands(info.tokens));
    row("dtype", info.dtype);
    row("sha256", info.sha256 + (a.verify ? " (verified)" : ""));
    row("bos_id / eos_id", fmt::format("{} / {}", info.bos_id, info.eos_id));
    if (info.entropy_rate_nats) {
      row("entropy rate", fmt::format("{:.12f} nats/token", *info.entropy_rate_nats));
    }
    for (size_t i = 0; i < info.sources.size(); ++i) row(i == 0 ? "sources" : "", info.sources[i]);
  }
  if (a.head > 0) {
    const int64_t n = std::min(a.head, file->size());
    std::vector<int64_t> ids(n);
    absl::Status st = file->Read(0, n, ids.data());
    if (!st.ok()) ExitWith(st);
    std::cout << "first " << n << " ids: " << StrJoin(ids, " ") << "\n";
    auto tok = data::Tokenizer::Load(info.tokenizer);
    if (tok.ok()) {
      std::cout << "decoded: " << (*tok)->Decode(ids) << "\n";
    } else {
      std::cout << "(cannot decode: " << Message(tok.status()) << ")\n";
    }
  }
}

void RunIdentify(const std::vector<std::string>& files, const std::string& sweep, bool json) {
  if (files.empty() == sweep.empty()) {
    ExitWith(absl::InvalidArgumentError("cart data identify: give token files or --sweep FILE"));
  }
  std::vector<cart::v1::DataIdentity> ids;
  std::vector<std::string> missing;
  if (!sweep.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile(sweep);
    if (!text.ok()) ExitWith(text.status());
    absl::StatusOr<config::SweepSpec> spec = config::ParseSweepYaml(*text, sweep);
    if (!spec.ok()) ExitWith(spec.status());
    absl::StatusOr<std::vector<cart::v1::DataIdentity>> found =
        SweepDataIdentities(*spec, &missing);
    if (!found.ok()) ExitWith(found.status());
    ids = *std::move(found);
  }
  for (const std::string& path : files) {
    absl::StatusOr<data::FileIdentity> id = data::IdentifyTokenFile(path, nullptr);
    if (!id.ok()) ExitWith(id.status());
    ids.push_back(IdentityProto(path, *id));
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const cart::v1::DataIdentity& d : ids) {
      out.push_back({{"path", d.path()},
                     {"sha256", d.sha256()},
                     {"size_bytes", d.size_bytes()},
                     {"tokens", d.tokens()},
                     {"tokenizer", d.tokenizer()},
                     {"tokenizer_sha256", d.tokenizer_sha256()}});
    }
    std::cout << out.dump() << "\n";
  }
  for (const cart::v1::DataIdentity& d : ids) {
    if (json) break;
    std::cout << fmt::format("{}\n  sha256 {}\n  {} bytes", d.path(), d.sha256(), d.size_bytes());
    if (d.tokens() >= 0) {
      std::cout << fmt::format(
          ", {} tokens\n  tokenizer {} ({})", d.tokens(), d.tokenizer(),
          d.tokenizer_sha256().empty() ? "its files are not readable here" : d.tokenizer_sha256());
    }
    std::cout << "\n";
  }
  for (const std::string& path : missing) std::cerr << path << ": not here\n";
}

}  // namespace

void RegisterDataCommands(CLI::App& app) {
  CLI::App* data_cmd = app.add_subcommand(
      "data", "Corpora, tokenizers and token files: tokenizer, prepare, synth, info");
  data_cmd->require_subcommand(1);

  CLI::App* tok = data_cmd->add_subcommand("tokenizer", "Train or try a tokenizer");
  tok->require_subcommand(1);

  auto train = std::make_shared<TrainArgs>();
  CLI::App* train_cmd =
      tok->add_subcommand("train", "Train a SentencePiece BPE model (Llama-2 style settings)");
  train_cmd->add_option("--input,input", train->inputs, "Corpus files (any format prepare reads)")
      ->required();
  train_cmd->add_option("--vocab", train->options.vocab, "Pieces, incl. 3 specials + 256 bytes")
      ->capture_default_str();
  train_cmd->add_option("--out", train->out, "Model to write, PATH.model")->required();
  train_cmd->add_option("--format", train->format, "auto|text|lines|tinystories|jsonl|parquet")
      ->capture_default_str();
  train_cmd->add_option("--text-field", train->text_field, "JSON Lines field holding the text")
      ->capture_default_str();
  train_cmd
      ->add_option("--coverage", train->options.character_coverage,
                   "Character coverage; the rest falls back to bytes")
      ->capture_default_str();
  train_cmd
      ->add_option("--max-sentences", train->options.max_sentences,
                   "Lines sampled for training (0 = all)")
      ->capture_default_str();
  train_cmd->add_option("--threads", train->options.threads, "Trainer threads (0 = all cores)");
  OnRun(train_cmd, [train] { RunTokenizerTrain(*train); });

  auto encode = std::make_shared<EncodeArgs>();
  CLI::App* encode_cmd = tok->add_subcommand("encode", "Print the ids of TEXT");
  encode_cmd
      ->add_option("--tokenizer", encode->tokenizer, "bytes | PATH.model | gpt2:DIR | synth:VOCAB")
      ->capture_default_str();
  encode_cmd->add_option("text", encode->text, "Text to encode")->required();
  OnRun(encode_cmd, [encode] { RunTokenizerEncode(*encode); });

  auto prep = std::make_shared<PrepareArgs>();
  CLI::App* prep_cmd = data_cmd->add_subcommand(
      "prepare",
      "Tokenize corpora into a token file (BOS + ids + EOS per document), holding out validation "
      "sets; or interleave token files into a mixture with --mix");
  prep_cmd->add_option("inputs", prep->inputs,
                       "Corpus files: text, lines, tinystories (<|endoftext|>), jsonl (.gz ok), "
                       "parquet; a directory stands for the .parquet shards under it");
  prep_cmd->add_option("--format", prep->format, "auto|text|lines|tinystories|jsonl|parquet")
      ->capture_default_str();
  prep_cmd
      ->add_option("--text-field", prep->text_field,
                   "JSON Lines field or Parquet column holding the text")
      ->capture_default_str();
  prep_cmd
      ->add_option("--tokenizer", prep->tokenizer, "bytes | PATH.model | gpt2:DIR | synth:VOCAB")
      ->capture_default_str();
  prep_cmd->add_option("--out", prep->out, "Token file to write, NAME.bin")->required();
  prep_cmd->add_option("--val", prep->val,
                       "Holdout NAME=FRACTION (e.g. val=0.01) or NAME=COUNT (documents); "
                       "written to NAME.bin beside --out; repeatable");
  prep_cmd->add_option("--seed", prep->seed, "Seed of the fraction holdouts")
      ->capture_default_str();
  prep_cmd->add_option("--threads", prep->threads, "Encoding threads (0 = all cores)");
  prep_cmd->add_option(
      "--mix", prep->mix,
      "Mixture NAME=FILE.bin:WEIGHT,... e.g. tiny=a.bin:3,wiki=b.bin:3,edu=c.bin:4");
  prep_cmd->add_option("--chunk-tokens", prep->chunk_tokens,
                       "Mixture chunk size in tokens (default 512, the chunk size of the "
                       "paper's reference loader)");
  prep_cmd->add_option("--tokens", prep->tokens, "Mixture length limit (0 = until a source ends)");
  prep_cmd->add_option("--source", prep->sources,
                       "The mixture from corpora in one step: NAME=PATH (a file or a folder of "
                       "Parquet shards; repeat a NAME for more inputs), each prepared into "
                       "OUT.NAME.bin, then interleaved into --out");
  prep_cmd->add_option("--weight", prep->weights,
                       "NAME=W: a --source's chunks per cycle (default 1), e.g. tiny=3");
  prep_cmd->add_option("--max-tokens", prep->max_tokens,
                       "NAME=N: stop a --source at N tokens (300000000, 300M, 1.5B)");
  prep_cmd->add_flag("--dry-run", prep->dry_run,
                     "With --source: estimate each source's tokens and the disk it takes; "
                     "write nothing");
  OnRun(prep_cmd, [prep] { RunPrepare(*prep); });

  auto synth = std::make_shared<SynthArgs>();
  synth->options.out = "";
  CLI::App* synth_cmd = data_cmd->add_subcommand(
      "synth",
      "Write a synthetic token file from a seeded random Markov chain with a known "
      "entropy rate, and a held-out validation file");
  data::SynthOptions& so = synth->options;
  synth_cmd->add_option("--vocab", so.chain.vocab, "Vocabulary, 2..65536")->capture_default_str();
  synth_cmd->add_option("--order", so.chain.order, "Tokens of context, 1..4")
      ->capture_default_str();
  synth_cmd->add_option("--tokens", so.tokens, "Training tokens")->capture_default_str();
  synth_cmd->add_option("--val-tokens", so.val_tokens, "Validation tokens (0 = none)")
      ->capture_default_str();
  synth_cmd->add_option("--seed", so.chain.seed, "Seed of the chain")->capture_default_str();
  synth_cmd
      ->add_option("--concentration", so.chain.concentration,
                   "Dirichlet concentration of each row (smaller = more peaked)")
      ->capture_default_str();
  synth_cmd->add_option("--floor", so.chain.floor, "Uniform mixture weight of each row, (0, 1]")
      ->capture_default_str();
  synth_cmd->add_option("--out", so.out, "Token file to write, NAME.bin")->required();
  synth_cmd->add_option("--val-out", so.val_out, "Validation file (default NAME.val.bin)");
  OnRun(synth_cmd, [synth] { RunSynth(*synth); });

  auto info = std::make_shared<InfoArgs>();
  CLI::App* info_cmd = data_cmd->add_subcommand("info", "Show a token file's metadata");
  info_cmd->add_option("file", info->path, "NAME.bin")->required();
  info_cmd->add_flag("--verify", info->verify, "Recompute the sha256 of the tokens");
  info_cmd->add_flag("--json", info->json, "Print the metadata as JSON");
  info_cmd->add_option("--head", info->head, "Print and decode the first N tokens");
  OnRun(info_cmd, [info] { RunInfo(*info); });

  struct IdentifyArgs {
    std::vector<std::string> files;
    std::string sweep;
    bool json = false;
  };
  auto ident = std::make_shared<IdentifyArgs>();
  CLI::App* ident_cmd = data_cmd->add_subcommand(
      "identify",
      "Print the identity runs record for data files (sha256, size, tokens, tokenizer hash): of "
      "FILES, or of every file a sweep names (docs/architecture.md \"Data lineage\")");
  ident_cmd->add_option("files", ident->files, "Token files (NAME.bin)");
  ident_cmd->add_option("--sweep", ident->sweep, "A sweep file: identify the data it names");
  ident_cmd->add_flag("--json", ident->json, "A JSON array, one object per file");
  OnRun(ident_cmd, [ident] { RunIdentify(ident->files, ident->sweep, ident->json); });
}

}  // namespace cart::cli
