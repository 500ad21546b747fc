#include <algorithm>
#include <numeric>

#include "common/status.h"
#include "common/strings.h"
#include "data/prepare.h"

namespace cart::data {

absl::StatusOr<std::vector<MixSource>> ParseMixSpec(std::string_view spec) {
  std::vector<MixSource> sources;
  for (const std::string& item : Split(spec, ',')) {
    const auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat("--mix item \"", item, "\": ", why,
                                               "; expected NAME=FILE.bin[:WEIGHT], e.g. "
                                               "tiny=tiny.bin:3,wiki=wiki.bin:3,edu=edu.bin:4"));
    };
    const std::string_view it = Trim(item);
    if (it.empty()) return bad("empty");
    const size_t eq = it.find('=');
    if (eq == std::string_view::npos || eq == 0) return bad("no NAME=");
    MixSource s;
    s.name = std::string(it.substr(0, eq));
    std::string_view rest = it.substr(eq + 1);
    const size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos) {
      std::optional<int64_t> w = ParseInt64(rest.substr(colon + 1));
      if (!w || *w < 1) return bad("WEIGHT must be an integer >= 1");
      s.weight = *w;
      rest = rest.substr(0, colon);
    }
    if (rest.empty()) return bad("no FILE");
    s.path = std::string(rest);
    for (const MixSource& other : sources) {
      if (other.name == s.name) return bad("NAME used twice");
    }
    sources.push_back(std::move(s));
  }
  if (sources.empty()) return absl::InvalidArgumentError("--mix: no source given");
  return sources;
}

absl::StatusOr<TokenFileInfo> BuildMixture(const MixOptions& options) {
  if (options.sources.empty()) return absl::InvalidArgumentError("mixture: no source given");
  if (options.chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        StrCat("--chunk-tokens ", options.chunk_tokens, " out of range; allowed: >= 1"));
  }
  if (options.max_tokens < 0) {
    return absl::InvalidArgumentError(
        StrCat("--tokens ", options.max_tokens, " out of range; allowed: >= 0 (0 = no limit)"));
  }
  std::vector<TokenFile> files;
  int64_t g = 0;
  for (const MixSource& s : options.sources) {
    if (s.weight < 1) {
      return absl::InvalidArgumentError(
          StrCat("mixture source ", s.name, ": weight ", s.weight, "; allowed: >= 1"));
    }
    CART_ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open(s.path));
    if (!files.empty()) {
      const TokenFileInfo& a = files.front().info();
      const TokenFileInfo& b = f.info();
      const std::string& first = files.front().path();
      if (a.tokenizer != b.tokenizer || a.vocab != b.vocab || a.bos_id != b.bos_id ||
          a.eos_id != b.eos_id) {
        return absl::InvalidArgumentError(
            StrCat("mixture sources disagree: ", first, " has tokenizer ", a.tokenizer, " (vocab ",
                   a.vocab, ", bos ", a.bos_id, ", eos ", a.eos_id, ") but ", s.path, " has ",
                   b.tokenizer, " (vocab ", b.vocab, ", bos ", b.bos_id, ", eos ", b.eos_id, ")"));
      }
    }
    files.push_back(std::move(f));
    g = std::gcd(g, s.weight);
  }
  const size_t n = files.size();
  std::vector<int64_t> weights(n), cursor(n, 0);
  for (size_t i = 0; i < n; ++i) weights[i] = options.sources[i].weight / g;

  TokenFileInfo meta = files.front().info();
  meta.sources.clear();
  meta.entropy_rate_nats.reset();
  for (size_t i = 0; i < n; ++i) {
    meta.sources.push_back(StrCat(options.sources[i].name, "=", options.sources[i].path, ":",
                                  weights[i], " (sha256 ", files[i].info().sha256, ")"));
  }
  meta.sources.push_back(StrCat("interleaved in chunks of ", options.chunk_tokens, " tokens"));
  CART_ASSIGN_OR_RETURN(TokenFileWriter writer, TokenFileWriter::Create(options.out, meta));

  const int64_t limit = options.max_tokens > 0 ? options.max_tokens : INT64_MAX;
  std::vector<int64_t> buf(options.chunk_tokens);
  bool done = false;
  while (!done) {
    // A cycle starts only when every source can fill all its chunks, so that a mixture cut by
    // an exhausted source still has exactly the given proportions.
    for (size_t i = 0; i < n; ++i) {
      if (files[i].size() - cursor[i] < weights[i] * options.chunk_tokens) done = true;
    }
    for (size_t i = 0; i < n && !done; ++i) {
      for (int64_t c = 0; c < weights[i] && !done; ++c) {
        const int64_t take = std::min(options.chunk_tokens, limit - writer.tokens());
        CART_RETURN_IF_ERROR(files[i].Read(cursor[i], take, buf.data()));
        CART_RETURN_IF_ERROR(writer.Append(buf.data(), take));
        cursor[i] += take;
        if (writer.tokens() >= limit) done = true;
      }
    }
  }
  if (writer.tokens() == 0) {
    return absl::InvalidArgumentError(
        StrCat("mixture is empty: some source has fewer than weight × --chunk-tokens tokens (",
               options.chunk_tokens, " tokens per chunk)"));
  }
  return writer.Finish();
}

}  // namespace cart::data
